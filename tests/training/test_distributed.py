"""The same training command under ``accelerate launch`` with 2 CPU processes (gloo)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("accelerate")


def test_two_process_data_parallel(tmp_path: Path) -> None:
    out = tmp_path / "ddp"
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--cpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "-m",
        "budgetmix.cli",
        "train",
        "--preset",
        "echo-tiny",
        "--output-dir",
        str(out),
        "--no-progress",
        "--set",
        "sft_steps=2",
        "--set",
        "steps=2",
        "--set",
        "groups_per_step=2",
        "--set",
        "group_size=4",
        "--set",
        "sft_batch=8",
        "--set",
        "save_every=1",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2, 3]  # one log, written by the main process
    rl = [r for r in records if r["phase"] == "rl"]
    assert all(r["n"] == 8 for r in rl)  # both processes' rollouts are gathered
    assert (out / "final" / "model.safetensors").is_file()
    assert json.loads((out / "checkpoint" / "state.json").read_text())["step"] == 4
