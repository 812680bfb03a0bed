#!/usr/bin/env bash
# What the set-up of run.sh's commands costs, measured on a fresh clone (never in your
# working copy): for each profile in turn, in the same clone, scripts/bootstrap.sh's wall
# and CPU time with the load beside it, then what it added: the distributions pip installed
# (each virtualenv, .venv-* backends included), their download size (the same files fetched
# again with pip download), and the installed size.
#
#   bash scripts/measure_setup.sh demo        # what `bash run.sh demo` sets up
#   bash scripts/measure_setup.sh test        # what `bash run.sh test` sets up
#   bash scripts/measure_setup.sh demo test   # demo, then the switch to test
#
# Not counted: Debian packages (bubblewrap, redis-server: a few MB) and npm's openai.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/fresh-setup-XXXXXX)
git clone -q "$src" "$work/repo"
cd "$work/repo"
: > "$work/have"
for profile in "$@"; do
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  /usr/bin/time -f "%e %U %S" -o "$work/time" bash scripts/bootstrap.sh .venv "$profile"
  read -r wall user sys < "$work/time"
  for venv in .venv .venv-*; do
    [ -x "$venv/bin/python" ] || continue
    "$venv/bin/python" -m pip list --format=freeze --exclude-editable 2>/dev/null \
      | sed "s|^|$venv |"
  done | sort > "$work/now"
  comm -13 "$work/have" "$work/now" > "$work/new"
  rm -rf "$work/dl" && mkdir "$work/dl"
  for venv in $(cut -d' ' -f1 "$work/new" | sort -u); do  # one folder each: versions differ
    mkdir -p "$work/dl/$venv"
    sed -n "s|^$venv ||p" "$work/new" > "$work/new.txt"
    .venv/bin/python -m pip download -q --no-deps -r "$work/new.txt" -d "$work/dl/$venv" 2>&1 \
      | { grep -v "^WARNING: Location" || true; } >&2
  done
  cp "$work/now" "$work/have"
  printf 'measure: %s: %s s wall, %.0f s CPU, load before %s on %s cores; ' \
    "$profile" "$wall" "$(awk -v u="$user" -v s="$sys" 'BEGIN { print u + s }')" "$load" "$(nproc)"
  printf '%s distributions added, %s MB downloaded, %s MB installed in all (%s)\n' \
    "$(wc -l < "$work/new")" "$(du -sm "$work/dl" | cut -f1)" \
    "$(du -smc .venv .venv-* 2>/dev/null | tail -1 | cut -f1)" "$(ls -d .venv .venv-* 2>/dev/null | xargs)"
done
echo "measure: the clone is $work/repo (remove it when done)"
