#!/usr/bin/env bash
# Creates the virtualenv and installs budgetmix with every extra.
# torch is pinned first to the CPU wheel so no CUDA build is pulled in.
set -euo pipefail
VENV="${1:-.venv}"
# The sandbox for model-written code needs bubblewrap (docs/security.md). Install it where
# we can (root with apt-get); never fail the bootstrap over it.
if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap; } \
      >/dev/null 2>&1 || echo "bootstrap: could not install bubblewrap; the sandbox" \
      "falls back to unshare (root) or refuses to run untrusted code" >&2
  else
    echo "bootstrap: bubblewrap is not installed; the sandbox needs it" \
      "(Debian: sudo apt-get install bubblewrap)" >&2
  fi
fi
python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q "torch==2.13.0"
"$VENV/bin/python" -m pip install -q -e ".[all,dev]" --config-settings editable_mode=strict
# The observability backend of tests/backends, in a virtualenv of its own (it pins
# anthropic<2): about 3 minutes and 850 MB.
bash scripts/install_phoenix.sh
