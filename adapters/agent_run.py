"""What an agent run returns: :class:`AgentRun`, and :class:`EndEpisode`, the value a tool
returns to end the episode with its result (the values of :mod:`budgetmix.adapters.loop`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from budgetmix.adapters.base import ChatMessage, ToolCallRequest
from budgetmix.events import EpisodeResult, EpisodeStatus

__all__ = ["AgentRun", "EndEpisode"]


@dataclass(frozen=True, slots=True)
class EndEpisode:
    """What a tool returns to end the episode with its result (a ``submit`` tool, an
    environment that says the task is done).

    The model reads ``output`` as the tool's result; once the batch's tool messages are
    in, the episode finishes with ``success`` (the judge is not asked) and the model is
    not called again: the turn that ran the tool is the episode's last, as in a
    training rollout of a tool environment (docs/layout.md).
    """

    output: Any
    success: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentRun:
    """The outcome of :func:`run_agent`: the episode result, the conversation, the answer.

    ``messages`` is the full conversation (with the notices placed in observations under
    placement ``"observation"``, without any under ``"ephemeral"``); ``output`` is the
    final answer, or the grace turn's best-effort answer (``grace_answer``), or
    ``None`` when the budget ended the run first.
    """

    result: EpisodeResult
    messages: tuple[ChatMessage, ...]
    output: str | None
    grace_answer: bool = False
    ignored_tool_calls: tuple[ToolCallRequest, ...] = ()

    @property
    def status(self) -> EpisodeStatus:
        """How the episode ended."""
        return self.result.status

    @property
    def success(self) -> bool:
        """Whether the episode ended in success."""
        return self.result.success

    @property
    def turns_used(self) -> int:
        """Turns the episode used."""
        return self.result.turns_used
