#!/usr/bin/env bash
# Installs Google ADK (google-adk, with LiteLLM for its OpenAI-compatible model), the agent
# framework of tests/integrations/test_adk_gateway.py, into a virtualenv of its own
# (default .venv-adk): google-adk 2.13 holds OpenTelemetry at 1.44 and, held at the
# project's 1.45, resolves only to an older release with mcp 1.x, so it runs beside the app
# as a user's agent does and reaches budgetmix through the gateway's base_url alone. A
# failed install never fails the set-up: it says why, leaves the reason in
# $VENV/budgetmix-install-failed.txt, and the test skips with that reason.
set -uo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-.venv-adk}"
ADK_VERSION="2.13.0"
LITELLM_VERSION="1.110.2"
FAILED="$VENV/budgetmix-install-failed.txt"
version() {  # (sed reads all of pip's output: grep -q could fail pip with a broken pipe)
  "$VENV/bin/python" -m pip show "$1" 2>/dev/null | sed -n 's/^Version: //p'
}
if [ -x "$VENV/bin/python" ] && [ ! -e "$FAILED" ] && [ "$(version google-adk)" = "$ADK_VERSION" ] \
    && [ "$(version litellm)" = "$LITELLM_VERSION" ]; then
  exit 0
fi
fail() {
  mkdir -p "$VENV" && echo "google-adk $ADK_VERSION not installed ($1)" > "$FAILED"
  echo "google-adk $ADK_VERSION not installed ($1, see the set-up log): test_adk_gateway skips"
  exit 0
}
rm -f "$FAILED"
python3 -m venv "$VENV" || fail "python3 -m venv failed"
"$VENV/bin/python" -m pip install -q --upgrade pip || fail "pip could not upgrade itself"
"$VENV/bin/python" -m pip install -q "google-adk==$ADK_VERSION" "litellm==$LITELLM_VERSION" \
  || fail "pip install google-adk==$ADK_VERSION litellm==$LITELLM_VERSION failed"
echo "installed google-adk $ADK_VERSION, litellm $LITELLM_VERSION ($VENV)"
