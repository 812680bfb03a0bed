"""Every RL arm of an experiment from its SFT base, in one process or in several.

The RL runs of an experiment (each arm, each training seed) are independent given
the base. :func:`train_arms` runs them in order, or in ``workers`` spawned processes of
one thread each. Every run is keyed by its arm and seed and reproducible whatever the
thread count (issue 28), so the checkpoints are the same bytes either way
(``tests/training/test_experiment_workers.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from budgetmix.training.experiment.analysis import train_summary
from budgetmix.training.experiment.config import ExperimentConfig

if TYPE_CHECKING:
    from budgetmix.training.experiment.run import ExperimentRun

__all__ = ["default_workers", "train_arms"]


def _say(progress: bool, text: str) -> None:
    if progress:
        print(f"[experiment] {text}", flush=True)


def train_arms(
    run: ExperimentRun, workers: int = 1
) -> tuple[dict[str, list[Path]], dict[str, Any]]:
    """The SFT base (or the configured one), then every RL arm per seed from it; the
    checkpoint paths per arm (``base`` first) and each run's training summary.

    With ``workers`` > 1 the RL runs (independent given the base) run in that many
    spawned processes of one thread each; every run is keyed by its arm and seed and
    reproducible whatever the thread count, so the checkpoints are the same bytes as
    in one process (``tests/training/test_experiment_workers.py``)."""
    config = run.cfg
    base = (
        Path(config.base_model)
        if config.base_model is not None
        else run.timed("sft_base", run.train_base)
    )
    jobs = [(method, s) for s in range(config.seeds) for method in config.methods]
    if workers > 1:
        results = run.timed("rl", _train_parallel, run, base, jobs, workers)
    else:
        results = []
        for method, s in jobs:
            _say(run.progress, f"RL {method}, seed {s}")
            results.append(run.timed(f"rl_{method}", run.train_arm, method, s, base))
    arms: dict[str, list[Path]] = {"base": [base]}
    training: dict[str, Any] = {}
    for (method, _), (path, metrics) in zip(jobs, results, strict=True):
        arms.setdefault(method, []).append(path)
        training.setdefault(method, []).append(train_summary(metrics))
    return arms, training


def default_workers(config: ExperimentConfig) -> int:
    """RL processes for ``config`` on this machine: one per usable core, at most one per run."""
    import os

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(config.seeds * len(config.methods), cores or 1))


def _train_one(
    config: ExperimentConfig, out: Path, method: str, seed: int, base: Path
) -> tuple[Path, list[dict[str, Any]]]:
    """One RL run in a worker process (one thread)."""
    from budgetmix.training.data.reproducibility import reproducible
    from budgetmix.training.experiment.run import ExperimentRun

    with reproducible(1):
        return ExperimentRun(config, out, False).train_arm(method, seed, base)


def _train_parallel(
    run: ExperimentRun, base: Path, jobs: list[tuple[str, int]], workers: int
) -> list[tuple[Path, list[dict[str, Any]]]]:
    """Every RL run of ``jobs`` in ``workers`` spawned processes, results in job order."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    ctx = multiprocessing.get_context("spawn")  # no fork of a process holding torch threads
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futures = {
            pool.submit(_train_one, run.cfg, run.out, method, s, base): i
            for i, (method, s) in enumerate(jobs)
        }
        results: dict[int, tuple[Path, list[dict[str, Any]]]] = {}
        for done in as_completed(futures):
            i = futures[done]
            results[i] = done.result()
            _say(run.progress, f"RL {jobs[i][0]}, seed {jobs[i][1]}: done ({len(results)}/"
                               f"{len(jobs)}, {workers} processes)")  # fmt: skip
    return [results[i] for i in range(len(jobs))]
