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
# The strict editable install (what the type checker reads) lists the library's modules:
# when one is added, moved or removed, it is linked again (seconds), with no step by hand.
modules="$(find sdk evaluation adapters policies training gateway cli -name '*.py' \
  | LC_ALL=C sort | sha256sum | cut -d' ' -f1)"
if ! set_up "$stamp" && ! set_up "$test_stamp"; then
  bash scripts/bootstrap.sh "$VENV" "$cmd"
  echo "$want" > "$stamp"
  echo "$modules" > "$VENV/.budgetmix-modules"
fi
if [ "$(cat "$VENV/.budgetmix-modules" 2>/dev/null)" != "$modules" ]; then
  log="$(mktemp)"
  if ! "$PY" -m pip install -q --no-deps -e . --config-settings editable_mode=strict >"$log" 2>&1
  then
    cat "$log" >&2; rm -f "$log"; exit 1
  fi
  rm -f "$log"
  echo "setup: budgetmix (editable): modules changed, linked again"
  echo "$modules" > "$VENV/.budgetmix-modules"
fi
case "$cmd" in
  demo) exec "$VENV/bin/budgetmix" demo "$@" ;;
  test)
    "$VENV/bin/ruff" check sdk evaluation adapters policies training gateway cli tests examples bench
    "$VENV/bin/mypy" -p budgetmix
    "$VENV/bin/lint-imports"
    exec "$PY" -m pytest -q "$@" ;;
esac
