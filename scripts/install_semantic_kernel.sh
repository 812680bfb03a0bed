#!/usr/bin/env bash
# Installs Semantic Kernel (semantic-kernel), the agent framework of
# tests/integrations/test_semantic_kernel_gateway.py, into a virtualenv of its own (default
# .venv-sk): beside the project's extras it resolves only to 1.8, with pandas downgraded,
# so it runs beside the app as a user's agent does and reaches budgetmix through the
# gateway's base_url alone. A failed install never fails the set-up: it says why, leaves
# the reason in $VENV/budgetmix-install-failed.txt, and the test skips with that reason.
set -uo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-.venv-sk}"
SK_VERSION="1.45.0"
FAILED="$VENV/budgetmix-install-failed.txt"
version() {  # (sed reads all of pip's output: grep -q could fail pip with a broken pipe)
  "$VENV/bin/python" -m pip show "$1" 2>/dev/null | sed -n 's/^Version: //p'
}
if [ -x "$VENV/bin/python" ] && [ ! -e "$FAILED" ] && [ "$(version semantic-kernel)" = "$SK_VERSION" ]; then
  exit 0
fi
fail() {
  mkdir -p "$VENV" && echo "semantic-kernel $SK_VERSION not installed ($1)" > "$FAILED"
  echo "semantic-kernel $SK_VERSION not installed ($1, see the set-up log): test_semantic_kernel_gateway skips"
  exit 0
}
rm -f "$FAILED"
python3 -m venv "$VENV" || fail "python3 -m venv failed"
"$VENV/bin/python" -m pip install -q --upgrade pip || fail "pip could not upgrade itself"
"$VENV/bin/python" -m pip install -q "semantic-kernel==$SK_VERSION" \
  || fail "pip install semantic-kernel==$SK_VERSION failed"
echo "installed semantic-kernel $SK_VERSION ($VENV)"
