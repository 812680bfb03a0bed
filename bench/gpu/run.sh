#!/usr/bin/env bash
# The GPU bench in one command, on a machine with one NVIDIA GPU and pip access to PyPI:
#
#     bash bench/gpu/run.sh [bench.py flags]      # results in bench/gpu/results/
#
# Installs a CUDA build of torch with vLLM, TRL and this package into a venv of its own
# (BENCH_VENV, default ~/.cache/budgetmix-bench-gpu/venv; BENCH_SKIP_INSTALL=1 reuses it
# or the python in BENCH_PYTHON), then runs bench/gpu/bench.py. Pins: VLLM_SPEC
# (default vllm==0.31.0, the newest vLLM TRL 1.16 supports: 0.22 to 0.31) and TRL_SPEC
# (default trl==1.16.0). Then the experiment's GPU preset (bench/gpu/design.sh, one seed
# per base unless DESIGN_SEEDS; BENCH_DESIGN=0 skips it). See bench/gpu/README.md.
set -euo pipefail
cd "$(dirname "$0")/../.."

VENV=${BENCH_VENV:-$HOME/.cache/budgetmix-bench-gpu/venv}
VLLM_SPEC=${VLLM_SPEC:-vllm==0.31.0}
TRL_SPEC=${TRL_SPEC:-trl==1.16.0}
OUT=${BENCH_OUT:-bench/gpu/results}

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L; then
    echo "bench/gpu/run.sh: no NVIDIA GPU found (nvidia-smi -L failed)" >&2
    exit 2
fi

if [ -z "${BENCH_SKIP_INSTALL:-}" ]; then
    t0=$(date +%s)
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --upgrade pip
    # vLLM brings the CUDA build of torch it was built against, and transformers.
    "$VENV/bin/pip" install -q "$VLLM_SPEC" "$TRL_SPEC" datasets accelerate peft safetensors tokenizers
    "$VENV/bin/pip" install -q "pydantic>=2.7,<3" "opentelemetry-api>=1.25" \
        "opentelemetry-sdk>=1.25" "httpx>=0.27" "rich>=13"
    "$VENV/bin/pip" install -q --no-deps -e .
    echo "bench/gpu/run.sh: installed in $(( $(date +%s) - t0 )) s"
fi
PY=${BENCH_PYTHON:-$VENV/bin/python}

"$PY" - <<'PYEOF'
import torch, vllm, trl, transformers
assert torch.cuda.is_available(), "torch sees no CUDA device (a CPU build of torch?)"
print("torch", torch.__version__, "CUDA", torch.version.cuda, "on", torch.cuda.get_device_name(0))
print("vllm", vllm.__version__, "trl", trl.__version__, "transformers", transformers.__version__)
PYEOF

export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4} TOKENIZERS_PARALLELISM=false
t0=$(date +%s)
status=0
"$PY" bench/gpu/bench.py --out "$OUT" "$@" || status=$?
echo "bench/gpu/run.sh: bench ran in $(( $(date +%s) - t0 )) s; results in $OUT/results.md"

# The experiment's GPU preset (bench/gpu/design.sh): DESIGN_SEEDS training seeds per base
# (default 1 here; the preregistered design is 8: DESIGN_SEEDS=8); BENCH_DESIGN=0 skips it.
if [ "${BENCH_DESIGN:-1}" != 0 ]; then
    t0=$(date +%s)
    design_status=0
    BENCH_PYTHON="$PY" SEEDS=${DESIGN_SEEDS:-1} OUT="$OUT/design" bash bench/gpu/design.sh \
        > "$OUT/design.log" 2>&1 || design_status=$?
    echo "bench/gpu/run.sh: the GPU preset ran in $(( $(date +%s) - t0 )) s" \
        "(status $design_status); $OUT/design/summary.json, log $OUT/design.log"
    [ "$design_status" = 0 ] || status=$design_status
fi
exit "$status"
