"""RL runs in worker processes give the same checkpoints, byte for byte, as in one process."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from budgetmix.exceptions import ConfigError

pytest.importorskip("torch")


def _digests(arms: dict[str, list[Path]]) -> dict[str, list[str]]:
    return {
        arm: [hashlib.sha256((p / "model.safetensors").read_bytes()).hexdigest() for p in paths]
        for arm, paths in arms.items()
    }


@pytest.mark.slow
def test_two_worker_processes_train_the_same_bytes_as_one(tmp_path: Path) -> None:
    from budgetmix.training.experiment.arms import train_arms
    from budgetmix.training.experiment.config import experiment_preset
    from budgetmix.training.experiment.run import ExperimentRun

    cfg = experiment_preset("ci", seeds=2, threads=2)
    one = ExperimentRun(cfg, tmp_path / "one", False)
    arms1, training1 = train_arms(one, workers=1)
    two = ExperimentRun(cfg, tmp_path / "two", False)
    arms2, training2 = train_arms(two, workers=2)
    assert list(arms1) == list(arms2) == ["base", *cfg.methods]
    assert all(len(arms1[m]) == cfg.seeds for m in cfg.methods)
    assert _digests(arms1) == _digests(arms2)  # every checkpoint, same bytes
    assert training1 == training2  # and the same training logs, in the same order
    assert "rl" in two.timings and "rl_fixed" in one.timings


def test_workers_must_be_a_whole_number_of_at_least_one(tmp_path: Path) -> None:
    from budgetmix.training.experiment.config import experiment_preset
    from budgetmix.training.experiment.run import run_experiment

    with pytest.raises(ConfigError, match="workers"):
        run_experiment(experiment_preset("ci"), tmp_path, workers=0)
