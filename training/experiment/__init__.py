"""The end-to-end experiment: BudgetMix RL against fixed-budget RL, on a CPU.

* :mod:`.config` -- :class:`ExperimentConfig` and its presets;
* :mod:`.run` -- :func:`run_experiment`, the pipeline (oracle, SFT base, RL arms,
  Pass@(K,T) grid, diagnostics) and the :class:`ExperimentReport` it returns;
* :mod:`.analysis` -- the grid, comparison and diagnostics rows, pooled over seeds;
* :mod:`.environments` -- the per-environment record the pipeline reads (tasks,
  exact Q, moves, ceiling, oracle curves, the budget-dependent decision);
* :mod:`.stats` -- seed-level t-intervals, t-tests and Holm;
* :mod:`.lm` -- a trained model as a batched diagnostics policy;
* :mod:`.report` -- ``report.md``, ``summary.json`` and the plots.

Environments (``ExperimentConfig.env``): ``frozenlake-compact``
(:mod:`budgetmix.training.envs.frozenlake_compact`, the default) and
``faulty-tools-compact`` (:mod:`budgetmix.training.envs.faulty_tools_compact`,
presets ``tools`` and ``full-tools``). Importing this package
imports neither torch nor transformers.
"""

from __future__ import annotations

from budgetmix.training.experiment.config import (
    EXPERIMENT_PRESETS,
    METHODS,
    ExperimentConfig,
    experiment_preset,
)
from budgetmix.training.experiment.run import ExperimentReport, run_experiment

__all__ = [
    "EXPERIMENT_PRESETS",
    "METHODS",
    "ExperimentConfig",
    "ExperimentReport",
    "experiment_preset",
    "run_experiment",
]
