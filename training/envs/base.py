"""The environment protocol shared by evaluation and training.

An environment is a text game: ``reset(seed)`` returns the first observation,
``step(action_text)`` returns a :class:`StepResult`. Every step carries a
:class:`StepLabel` (was the action valid, did it make progress, which mistake
kind if any) so mistakes and recoveries are measurable without a model in the
loop. Environments own their reward: 1.0 on success, 0.0 otherwise, unless a
subclass documents more.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from budgetmix.exceptions import BudgetmixError

__all__ = ["EnvFactory", "EnvStateError", "Environment", "StepLabel", "StepResult", "Task"]


class EnvStateError(BudgetmixError, RuntimeError):
    """``step()`` was called before ``reset()`` or after the episode ended."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StepLabel:
    """Per-step labels. ``mistake`` is a :class:`budgetmix.MistakeKind` value or ``None``."""

    valid: bool = True
    progress: bool = False
    mistake: str | None = None
    detail: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class StepResult:
    """What one action did."""

    observation: str
    reward: float = 0.0
    done: bool = False
    success: bool = False
    label: StepLabel = field(default_factory=StepLabel)
    info: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class Environment(Protocol):
    """A multi-turn text environment."""

    name: str

    def instructions(self) -> str:
        """The task statement shown once, before the first observation."""
        ...

    def reset(self, seed: int) -> str:
        """Start an episode for ``seed``; returns the first observation."""
        ...

    def step(self, action: str) -> StepResult:
        """Apply the model's action text."""
        ...


#: Builds a fresh environment (one per episode, so episodes can run concurrently).
EnvFactory = Callable[[], Environment]


@dataclass(frozen=True, slots=True, kw_only=True)
class Task:
    """One evaluation or training task: an environment factory and a seed."""

    task_id: str
    make_env: EnvFactory
    seed: int = 0
    metadata: Mapping[str, Any] = field(default_factory=dict)
