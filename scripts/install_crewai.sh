#!/usr/bin/env bash
# Installs CrewAI, the agent framework of tests/integrations/test_crewai_gateway.py, into a
# virtualenv of its own (default .venv-crewai): it pins openai<3 and mcp<2, which the
# project's extras do not allow beside each other, so it runs beside the app as a user's
# crew does and reaches budgetmix through the gateway's base_url alone. The test skips
# when this virtualenv is absent. A failed install never fails the set-up: it says why
# and exits 0.
set -uo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-.venv-crewai}"
CREWAI_VERSION="1.15.30"
# (sed reads all of pip's output: grep -q stopping early could fail pip with a broken pipe)
if [ -x "$VENV/bin/python" ] && [ "$("$VENV/bin/python" -m pip show crewai 2>/dev/null \
    | sed -n 's/^Version: //p')" = "$CREWAI_VERSION" ]; then
  exit 0
fi
if ! python3 -m venv "$VENV" \
    || ! "$VENV/bin/python" -m pip install -q --upgrade pip \
    || ! "$VENV/bin/python" -m pip install -q "crewai==$CREWAI_VERSION"; then
  echo "crewai $CREWAI_VERSION not installed (venv or pip failed, see the set-up log): test_crewai_gateway skips"
  exit 0
fi
echo "installed crewai $CREWAI_VERSION ($VENV)"
