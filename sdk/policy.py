"""The decision seams the controller consults, as protocols.

The families that implement them live in :mod:`budgetmix.policies`; the
defaults here are the controller's behaviour when nothing is configured:
a notice every turn in format ``v1``, exhaustion ends the episode, no
extensions, no early stop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from budgetmix.events import Mistake
from budgetmix.ledger import LedgerState
from budgetmix.notice import DEFAULT_NOTICE_FORMAT

__all__ = [
    "EarlyStopPolicy",
    "EpisodeView",
    "EveryTurnNotice",
    "ExhaustionMode",
    "ExtensionPolicy",
    "NoticePolicy",
    "StepRecord",
]

ExhaustionMode = Literal["end", "raise", "grace"]


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One step (tool call or environment action) as policies see it."""

    turn: int
    ok: bool
    progress: bool = False
    mistake: str | None = None


class EpisodeView(Protocol):
    """Read-only view of an episode, the only thing policies see."""

    @property
    def state(self) -> LedgerState: ...

    @property
    def mistakes(self) -> Sequence[Mistake]: ...

    @property
    def steps(self) -> Sequence[StepRecord]: ...

    @property
    def grants(self) -> int: ...


@runtime_checkable
class NoticePolicy(Protocol):
    """Decides whether the model sees a notice this turn, and in which format."""

    @property
    def format(self) -> str: ...

    def should_notify(self, state: LedgerState) -> bool: ...


@runtime_checkable
class ExtensionPolicy(Protocol):
    """Asked when a limit refuses a turn; returns amounts to grant, or ``None``."""

    def on_limit(self, view: EpisodeView, dimension: str) -> dict[str, float] | None: ...


@runtime_checkable
class EarlyStopPolicy(Protocol):
    """Asked after every step; returns a reason to stop the episode, or ``None``."""

    def check(self, view: EpisodeView) -> str | None: ...


@dataclass(frozen=True, slots=True)
class EveryTurnNotice:
    """A notice on every turn (the default, and what training uses)."""

    format: str = DEFAULT_NOTICE_FORMAT

    def should_notify(self, state: LedgerState) -> bool:
        return True
