"""BudgetMix RL for local models: budget-aware multi-turn rollouts, GRPO/RLOO, SFT warm start.

Importing this package stays light: torch and transformers load on first use
of a name below (``from budgetmix.training import train``). The ``budgetmix
train`` command is :mod:`budgetmix.cli.train`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from budgetmix.training.config import PRESETS, TrainConfig, load_config, preset
    from budgetmix.training.rollouts.chat import ChatCodec, environment_message
    from budgetmix.training.rollouts.rollout import (
        EpisodeSpec,
        Rollout,
        RolloutSettings,
        run_rollouts,
    )
    from budgetmix.training.trainer import TrainResult, train

__all__ = [
    "PRESETS",
    "ChatCodec",
    "EpisodeSpec",
    "Rollout",
    "RolloutSettings",
    "TrainConfig",
    "TrainResult",
    "environment_message",
    "load_config",
    "preset",
    "run_rollouts",
    "train",
]

_HOME = {
    "ChatCodec": "rollouts.chat",
    "environment_message": "rollouts.chat",
    "PRESETS": "config",
    "TrainConfig": "config",
    "load_config": "config",
    "preset": "config",
    "EpisodeSpec": "rollouts.rollout",
    "Rollout": "rollouts.rollout",
    "RolloutSettings": "rollouts.rollout",
    "run_rollouts": "rollouts.rollout",
    "TrainResult": "trainer",
    "train": "trainer",
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'budgetmix.training' has no attribute {name!r}")
    return getattr(importlib.import_module(f"budgetmix.training.{_HOME[name]}"), name)
