"""The training command under ``accelerate launch`` with 2 CPU processes: two ranks, one gloo group.

The launch is the documented one (``accelerate launch --multi_gpu --num_processes 2``
on a machine without a GPU); ``_ddp_probe.py`` runs ``budgetmix.cli.main`` in each
rank and writes what that rank saw: its rank and world size, and for every RL step
its advantages and a digest of its parameters before and after the step.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from budgetmix.exceptions import ConfigError

pytest.importorskip("accelerate")

from budgetmix.training.engines.distributed import launch_world_size, prepare_launch

PROBE = Path(__file__).with_name("_ddp_probe.py")

#: groups_per_step=4 split over 2 ranks; 12 SFT steps on one letter leave a policy that
#: succeeds sometimes, so groups have reward variance and non-zero advantages.
TRAIN = [
    "train",
    "--preset",
    "echo-tiny",
    "--no-progress",
    "--set",
    'env_kwargs={"letters": "a", "min_len": 1, "max_len": 1}',
    "--set",
    "sft_steps=12",
    "--set",
    "sft_batch=8",
    "--set",
    "steps=2",
    "--set",
    "groups_per_step=4",
    "--set",
    "group_size=4",
    "--set",
    "save_every=1",
]


def _launch(target: list[str]) -> subprocess.CompletedProcess[str]:
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu"]
    launch += ["--num_processes", "2", "--num_machines", "1", "--main_process_port", "0"]
    launch += ["--mixed_precision", "no", "--dynamo_backend", "no"]
    env = {k: v for k, v in os.environ.items() if k != "ACCELERATE_USE_CPU"}
    env |= {"OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run(
        [*launch, *target], capture_output=True, text=True, timeout=400, env=env, check=False
    )


def _reports(report_dir: Path) -> list[dict[str, Any]]:
    return [json.loads((report_dir / f"rank{r}.json").read_text()) for r in (0, 1)]


@pytest.mark.slow
def test_two_ranks_train_as_one_data_parallel_group(tmp_path: Path) -> None:
    out, report_dir = tmp_path / "ddp", tmp_path / "ranks"
    proc = _launch([str(PROBE), str(report_dir), *TRAIN, "--output-dir", str(out)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = _reports(report_dir)
    assert ranks[0]["pid"] != ranks[1]["pid"]  # two processes
    for r, rank in enumerate(ranks):
        assert (rank["rank"], rank["world"]) == (r, 2)
        assert (rank["torch_rank"], rank["torch_world"], rank["backend"]) == (r, 2, "gloo")
        assert rank["distributed_type"] == "MULTI_CPU"
    steps0, steps1 = ranks[0]["rl_steps"], ranks[1]["rl_steps"]
    assert [s["step"] for s in steps0] == [s["step"] for s in steps1] == [12, 13]
    learning = 0
    for s0, s1 in zip(steps0, steps1, strict=True):
        assert s0["before"] == s1["before"] and s0["after"] == s1["after"]  # equal parameters
        assert len(s0["advantages"]) == len(s1["advantages"]) == 8  # 2 groups x 4 each
        if any(a != 0 for a in s0["advantages"] + s1["advantages"]):
            learning += 1
            assert s0["after"] != s0["before"]  # the averaged gradient moved both ranks
    assert learning >= 1, "no RL step had a non-zero advantage: nothing was tested"
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(14))  # one log, by the main process
    assert all(r["n"] == 16 for r in records if r["phase"] == "rl")  # both ranks gathered
    assert (out / "final" / "model.safetensors").is_file()
    assert json.loads((out / "checkpoint" / "state.json").read_text())["step"] == 14


@pytest.mark.slow
def test_a_single_process_launch_of_several_is_refused(tmp_path: Path) -> None:
    """``--cpu --num_processes 2`` starts one process: the run stops instead of training alone."""
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--cpu", "--num_processes", "2"]
    cmd += ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
    cmd += ["-m", "budgetmix.cli", *TRAIN, "--output-dir", str(tmp_path / "one")]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=200, env=env, check=False)
    assert proc.returncode != 0, proc.stderr[-3000:]  # accelerate turns our 2 into its 1
    assert "budgetmix train: error: accelerate launch started 1 process" in proc.stderr
    assert "--multi_gpu --num_processes N" in proc.stderr
    assert not (tmp_path / "one" / "metrics.jsonl").exists()


def test_prepare_launch_reads_the_launcher() -> None:
    torchrun = {"WORLD_SIZE": "2", "LOCAL_RANK": "1", "RANK": "1"}
    env = dict(torchrun)
    assert prepare_launch(env, cuda_available=False) == 2
    assert env["ACCELERATE_USE_CPU"] == "true"  # the ranks join one gloo group
    env = dict(torchrun)
    assert prepare_launch(env, cuda_available=True) == 2
    assert "ACCELERATE_USE_CPU" not in env  # NCCL on GPUs, left to accelerate
    env = {**torchrun, "ACCELERATE_USE_CPU": "false"}
    prepare_launch(env, cuda_available=False)
    assert env["ACCELERATE_USE_CPU"] == "false"  # an explicit choice is kept
    assert prepare_launch({}, cuda_available=False) == 1  # no launcher: one process
    simple_one = {"ACCELERATE_USE_CPU": "True"}  # accelerate launch --num_processes 1
    assert prepare_launch(simple_one, cuda_available=False) == 1
    assert launch_world_size({"OMPI_COMM_WORLD_SIZE": "4"}) == 4
    with pytest.raises(ConfigError, match="--multi_gpu"):
        prepare_launch({"ACCELERATE_USE_CPU": "True", "MASTER_ADDR": "127.0.0.1"})
    with pytest.raises(ConfigError, match="WORLD_SIZE='two'"):
        launch_world_size({"WORLD_SIZE": "two"})
