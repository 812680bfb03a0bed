"""The same seed trains byte-identical checkpoints whatever the thread count, load or MKL path.

Two short ``budgetmix train`` runs (SFT, then GRPO with KL and stratified budgets, then
the final evaluation) of one config in separate processes: one with
``OMP_NUM_THREADS=1``, one with ``OMP_NUM_THREADS=2`` / ``MKL_NUM_THREADS=2`` under
artificial CPU load (a busy-looping process) and with MKL restricted to AVX2 (the
kernels of a machine without AVX-512). Every checkpoint tensor file, the metrics
(without the ``time_*`` fields), the printed summary and the fingerprint's digest must
be identical. On the code before issue 28 the runs differ (the thread count changed the
weights' bits and torch's global generator started from the OS's entropy).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from budgetmix.manifest import file_sha256
from budgetmix.training.data.provenance import (
    FINGERPRINT_FILE,
    fingerprint_differences,
    read_fingerprint,
)

pytest.importorskip("torch")

pytestmark = pytest.mark.slow  # end to end: outside the unit loop (-m "not slow")

#: Small enough for a few seconds per run; every phase of a run is in it.
TINY = {
    "sft_steps": 4,
    "sft_batch": 4,
    "steps": 2,
    "groups_per_step": 2,
    "group_size": 4,
    "group_budgets": "stratified",
    "kl_coef": 0.05,
    "hidden_size": 16,
    "num_heads": 2,
    "num_kv_heads": 1,
    "num_layers": 1,
    "max_new_tokens": 3,
    "minibatch_size": 4,
    "save_every": 1,
    "eval_episodes": 2,
    "seed": 5,
}
BUSY = "import time\nend = time.monotonic() + 120\nwhile time.monotonic() < end:\n    pass\n"


def _train(cwd: Path, env: dict[str, str]) -> str:
    cwd.mkdir()
    argv = [sys.executable, "-m", "budgetmix.cli", "train", "--preset", "echo-tiny"]
    argv += ["--output-dir", "run", "--no-progress"]
    for key, value in TINY.items():
        argv += ["--set", f"{key}={json.dumps(value)}"]
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "MKL_"))}
    done = subprocess.run(
        argv, cwd=cwd, env={**clean, **env}, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _tensor_files(run: Path) -> dict[str, str]:
    return {
        p.relative_to(run).as_posix(): file_sha256(p) for p in sorted(run.rglob("*.safetensors"))
    }


def _metrics(run: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("time_")} for r in rows]


def test_two_runs_of_one_seed_are_byte_identical_across_threads_and_load(
    tmp_path: Path,
) -> None:
    quiet = _train(tmp_path / "a", {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    busy = [subprocess.Popen([sys.executable, "-c", BUSY])]  # a core kept busy
    try:
        loaded = _train(
            tmp_path / "b",
            {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
        )
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()
    a, b = tmp_path / "a" / "run", tmp_path / "b" / "run"
    files = _tensor_files(a)
    assert {"checkpoint/model.safetensors", "final/model.safetensors"} <= set(files)
    assert "checkpoint/rng.safetensors" in files  # torch's generator and the sampler's
    assert files == _tensor_files(b)
    metrics = _metrics(a)
    assert [m["phase"] for m in metrics] == ["sft"] * 4 + ["rl"] * 2
    assert metrics == _metrics(b)
    assert quiet == loaded  # the printed summary: last step and the final evaluation
    fa, fb = read_fingerprint(a / FINGERPRINT_FILE), read_fingerprint(b / FINGERPRINT_FILE)
    assert fa is not None and fb is not None
    assert fa["threads"]["environment"]["OMP_NUM_THREADS"] == "1"
    assert fb["threads"]["environment"]["OMP_NUM_THREADS"] == "2"
    assert fa["threads"]["intra_op"] == fb["threads"]["intra_op"] == 1
    assert fa["kernels"]["aten_cpu_capability"] in ("AVX2", "DEFAULT")
    assert fa["checkpoints"] == {k: v for k, v in files.items()}
    assert fa["digest"] == fb["digest"]
    assert fingerprint_differences(fa, fb) == []
