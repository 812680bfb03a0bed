"""The end-to-end experiment: BudgetMix RL against fixed-budget RL on slippery FrozenLake, on a CPU.

* :mod:`.config` -- :class:`ExperimentConfig` and its presets;
* :mod:`.run` -- :func:`run_experiment`, the pipeline (oracle, SFT base, RL arms,
  Pass@(K,T) grid, diagnostics) and the :class:`ExperimentReport` it returns;
* :mod:`.analysis` -- the grid, comparison and diagnostics rows, pooled over seeds;
* :mod:`.lm` -- a trained model as a batched diagnostics policy;
* :mod:`.report` -- ``report.md``, ``summary.json`` and the plots.

The environment is ``frozenlake-compact``
(:mod:`budgetmix.training.envs.frozenlake_compact`). Importing this package
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
