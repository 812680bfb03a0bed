#!/usr/bin/env bash
# Sets up what one command of run.sh needs, and says what it is doing: one line per step
# with the time it took, then the total.
#
#   bash scripts/bootstrap.sh .venv demo   the core + the extras the demo uses (train, envs,
#                                          plots): no agent framework, no backend
#   bash scripts/bootstrap.sh .venv test   everything the suite needs: every extra and dev,
#                                          bubblewrap and the other system packages, each
#                                          scripts/install_*.sh (the backends' own virtualenvs)
#
# Each step looks first and installs only what is missing: going from demo to test adds the
# rest and reinstalls nothing (pip keeps each requirement already satisfied). torch is pinned
# to the CPU wheel first, so no CUDA build is pulled in. pip's output goes to $VENV/setup.log.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-.venv}"
PROFILE="${2:-test}"
PY="$VENV/bin/python"
TORCH="2.13.0"
# System packages of the test profile (Debian names), installed with apt-get as root:
# bubblewrap is the sandbox of model-written code (docs/security.md).
TEST_APT_PACKAGES=(bubblewrap)
case "$PROFILE" in
  demo|test) ;;
  *) echo "usage: bash scripts/bootstrap.sh [VENV] demo|test" >&2; exit 2 ;;
esac
mkdir -p "$VENV"
LOG="$VENV/setup.log"
: > "$LOG"

now() { date +%s%N; }
seconds_since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }'; }
START=$(now)

# step NAME FUNCTION...: run it with its output in the log; print NAME, its time and the
# one line it printed (what it did). A failing step shows the end of the log and stops.
step() {
  local name=$1 t note
  shift
  t=$(now)
  if ! note=$("$@" 2>>"$LOG"); then
    echo "setup: $name failed after $(seconds_since "$t") s; the end of $LOG:" >&2
    tail -n 25 "$LOG" >&2
    exit 1
  fi
  printf 'setup: %-44s %7s s  %s\n' "$name" "$(seconds_since "$t")" "${note##*$'\n'}" >&2
}

pip_quiet() { "$PY" -m pip "$@" >>"$LOG" 2>&1; }

make_venv() {
  if [ -x "$PY" ]; then echo "already there"; return; fi
  python3 -m venv "$VENV" && pip_quiet install -q --upgrade pip
  echo "created ($(python3 --version))"
}

# pip's version of a distribution, empty if it is not installed (sed reads all of pip's
# output: a reader that stops early, like grep -q, can fail pip with a broken pipe)
version_of() { "$PY" -m pip show "$1" 2>/dev/null | sed -n 's/^Version: //p'; }

torch_cpu() {
  if [[ "$(version_of torch)" == "$TORCH"* ]]; then
    echo "already there"
    return
  fi
  pip_quiet install -q "torch==$TORCH"
  echo "installed $(version_of torch)"
}

# The profile's requirements (scripts/setup_profiles.py reads them from pyproject.toml) with
# torch and its constraints held, so the demo picks nothing the suite would replace; pip
# installs only those not yet satisfied.
requirements() {
  local before after
  before=$("$PY" -m pip list --format=freeze 2>/dev/null | wc -l)
  pip_quiet install -q -r <("$PY" scripts/setup_profiles.py requirements "$PROFILE") \
    -c <("$PY" scripts/setup_profiles.py constraints "$PROFILE") "torch==$TORCH"
  after=$("$PY" -m pip list --format=freeze 2>/dev/null | wc -l)
  echo "$((after - before)) new distributions, $after in all"
}

# The editable install itself, without dependencies: redone only when pyproject.toml changed.
package() {
  local want
  want=$(sha256sum pyproject.toml | cut -c1-16)
  if [ "$(cat "$VENV/.budgetmix-package" 2>/dev/null)" = "$want" ] \
      && [ -n "$(version_of budgetmix)" ]; then
    echo "already there"
    return
  fi
  pip_quiet install -q --no-deps -e . --config-settings editable_mode=strict
  echo "$want" > "$VENV/.budgetmix-package"
  echo "installed (editable)"
}

apt_packages() {
  local missing=() p
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if [ ${#missing[@]} = 0 ]; then echo "already there"; return; fi
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    # never fail the set-up over them; the tests that need one skip or say what to install
    echo "not installed (needs root and apt-get): sudo apt-get install ${missing[*]}"
    return
  fi
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -qq "${missing[@]}"; } >>"$LOG" 2>&1; then
    echo "could not install ${missing[*]} (see $LOG); the tests that need them skip"
    return
  fi
  echo "installed ${missing[*]}"
}

# scripts/install_NAME.sh: one step each; its last line of output says what it did.
install_script() {
  local out
  out=$(bash "$1" 2>>"$LOG")
  echo "${out:-done}"
}

step "virtualenv $VENV" make_venv
step "torch $TORCH, CPU wheel" torch_cpu
step "requirements of budgetmix[$(python3 scripts/setup_profiles.py extras "$PROFILE")]" requirements
step "budgetmix (editable)" package
if [ "$PROFILE" = test ]; then
  step "system packages: ${TEST_APT_PACKAGES[*]}" apt_packages "${TEST_APT_PACKAGES[@]}"
  for script in scripts/install_*.sh; do
    [ -e "$script" ] || continue
    step "$(basename "$script" .sh | sed 's/^install_//') ($script)" install_script "$script"
  done
fi
printf 'setup: %-44s %7s s\n' "total ($PROFILE)" "$(seconds_since "$START")" >&2
