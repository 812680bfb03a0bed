#!/usr/bin/env bash
# Installs Arize Phoenix, the observability backend of the tests/backends group and of
# scripts/phoenix_screenshot.sh, into a virtualenv of its own (default .venv-phoenix):
# arize-phoenix pins anthropic<2, which budgetmix's anthropic extra (2.x) contradicts,
# so it cannot share .venv; it runs beside the app as a user's backend does.
# A fresh install takes about 3 minutes and 850 MB here.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-.venv-phoenix}"
PHOENIX_VERSION="20.26.1"
if [ -x "$VENV/bin/phoenix" ] && "$VENV/bin/python" -m pip show arize-phoenix 2>/dev/null \
    | grep -x "Version: $PHOENIX_VERSION" >/dev/null; then  # not -q: pip must not lose its pipe
  echo "arize-phoenix $PHOENIX_VERSION already there ($VENV)"
  exit 0
fi
python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q "arize-phoenix==$PHOENIX_VERSION"
echo "installed arize-phoenix $PHOENIX_VERSION ($VENV)"
