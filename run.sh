#!/usr/bin/env bash
# The two commands a new user needs:
#   bash run.sh demo   - the main job on embedded defaults (no API key, no server)
#   bash run.sh test   - lint, strict type check, the import contract and the test suite
# Both create .venv and install what they need on first use.
set -euo pipefail
cd "$(dirname "$0")"
VENV=.venv
PY="$VENV/bin/python"
stamp="$VENV/.budgetmix-installed"
want="$(cat pyproject.toml scripts/bootstrap.sh | sha256sum | cut -d' ' -f1)"
if [ ! -x "$PY" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  bash scripts/bootstrap.sh "$VENV"
  echo "$want" > "$stamp"
fi
cmd="${1:-demo}"; shift || true
case "$cmd" in
  demo) exec "$VENV/bin/budgetmix" demo "$@" ;;
  test)
    "$VENV/bin/ruff" check sdk evaluation adapters policies training gateway cli tests examples bench
    "$VENV/bin/mypy" -p budgetmix
    "$VENV/bin/lint-imports"
    exec "$PY" -m pytest -q "$@" ;;
  *) echo "usage: bash run.sh [demo|test] [args...]" >&2; exit 2 ;;
esac
