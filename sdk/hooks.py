"""Hooks: callbacks with one grammar (``on_*``), no-op by default.

Subclass :class:`Hooks` and override what you need. A hook that raises is
logged and recorded on the episode; it never corrupts the ledger or the
episode's outcome. :mod:`budgetmix.instrumentation` is what calls them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from budgetmix.events import EpisodeResult, Mistake, Recovery
from budgetmix.ledger import LedgerState

if TYPE_CHECKING:
    from budgetmix.episode import Episode
    from budgetmix.steps import ToolCall

__all__ = ["Hooks"]


class Hooks:
    """Episode callbacks; every method is a no-op unless overridden."""

    def on_turn(self, episode: Episode, turn: int) -> None:
        """A model turn was charged and is about to be sent."""

    def on_tool_result(self, episode: Episode, call: ToolCall) -> None:
        """A tool call ended (``call.ok`` tells how)."""

    def on_mistake(self, episode: Episode, mistake: Mistake) -> None:
        """A mistake was recorded."""

    def on_recovery(self, episode: Episode, recovery: Recovery) -> None:
        """A successful step followed one or more mistakes."""

    def on_budget_warning(self, episode: Episode, state: LedgerState) -> None:
        """The remaining turns fell to the warning threshold."""

    def on_exhausted(self, episode: Episode, dimension: str) -> None:
        """A limit refused a turn or a tool batch."""

    def on_finish(self, episode: Episode, result: EpisodeResult) -> None:
        """The episode ended with ``result``."""
