#!/usr/bin/env bash
# The two commands a new user needs:
#   bash run.sh demo   - the main job on embedded defaults (no API key, no server)
#   bash run.sh test   - lint, strict type check, the import contract and the test suite
# Each sets up .venv with what it needs on first use (scripts/bootstrap.sh prints one line
# per step with its time): demo the core and the demo's extras, test everything the suite
# needs. After demo, test only adds what is missing; after test, demo has all it needs.
set -euo pipefail
cd "$(dirname "$0")"
VENV=.venv
PY="$VENV/bin/python"
cmd="${1:-demo}"; shift || true
case "$cmd" in
  demo|test) ;;
  *) echo "usage: bash run.sh [demo|test] [args...]" >&2; exit 2 ;;
esac
# A stamp per command holds the hash of what set it up; the test set-up covers the demo's.
want="$(cat pyproject.toml scripts/bootstrap.sh scripts/setup_profiles.py scripts/install_*.sh \
  | sha256sum | cut -d' ' -f1)"
test_stamp="$VENV/.budgetmix-installed"
stamp="$test_stamp"; [ "$cmd" = demo ] && stamp="$VENV/.budgetmix-demo"
set_up() { [ -x "$PY" ] && [ "$(cat "$1" 2>/dev/null)" = "$want" ]; }
if ! set_up "$stamp" && ! set_up "$test_stamp"; then
  bash scripts/bootstrap.sh "$VENV" "$cmd"
  echo "$want" > "$stamp"
fi
case "$cmd" in
  demo) exec "$VENV/bin/budgetmix" demo "$@" ;;
  test)
    "$VENV/bin/ruff" check sdk evaluation adapters policies training gateway cli tests examples bench
    "$VENV/bin/mypy" -p budgetmix
    "$VENV/bin/lint-imports"
    exec "$PY" -m pytest -q "$@" ;;
esac
