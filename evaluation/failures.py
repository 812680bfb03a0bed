"""The failure breakdown: one category per episode, from its result and the env's labels.

Mapping, first match wins:

====================  =======================================================================
category              when
====================  =======================================================================
success               ``EpisodeStatus.SUCCESS`` (the environment reported success)
budget_exhausted      ``BUDGET_EXHAUSTED``: a limit (turns, tool calls, ...) refused a turn
early_stop            ``EARLY_STOPPED``: an early-stop policy ended the episode
provider_error        the agent raised :class:`~budgetmix.ProviderError` (after retries)
error                 the agent or environment raised anything else (``on_error="record"``)
(env's own)           ``FAILED`` and the last step's ``info["failure"]`` is a category name
tool_error            ``FAILED``; the last step's mistake was ``tool_error``
invalid_arguments     ``FAILED``; last mistake ``invalid_tool_arguments`` or ``unknown_tool``
format_error          ``FAILED``; last mistake ``model_format_error``
wrong_final_answer    ``FAILED`` otherwise: the environment ended the episode without
                      success (wrong submission, FrozenLake hole, failing final tests)
====================  =======================================================================

``FAILED`` is the status of an episode the environment ended (``done``) without
success. Budget exhaustion wins over the mistakes that preceded it: an agent
that keeps making format errors until its turns run out is ``budget_exhausted``
(its mistakes are counted in the recovery metrics).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from budgetmix.events import EpisodeStatus

__all__ = ["FAILURE_CATEGORIES", "classify_failure"]

#: Every category, in report order.
FAILURE_CATEGORIES: tuple[str, ...] = (
    "success",
    "budget_exhausted",
    "tool_error",
    "invalid_arguments",
    "format_error",
    "provider_error",
    "early_stop",
    "wrong_final_answer",
    "error",
)

_BY_MISTAKE = {
    "tool_error": "tool_error",
    "invalid_tool_arguments": "invalid_arguments",
    "unknown_tool": "invalid_arguments",
    "model_format_error": "format_error",
    "provider_error": "provider_error",
}


def classify_failure(
    status: EpisodeStatus | str,
    *,
    last_mistake: str | None = None,
    last_info: Mapping[str, Any] | None = None,
    exception: str | None = None,
) -> str:
    """The failure category of one episode (see the module table).

    Args:
        status: the episode's terminal status.
        last_mistake: the mistake label of the environment's last step, if any.
        last_info: the ``info`` of the environment's last step.
        exception: ``"provider_error"`` or ``"error"`` when the agent raised.
    """
    st = EpisodeStatus(status)
    if st is EpisodeStatus.SUCCESS:
        return "success"
    if exception is not None:
        return "provider_error" if exception == "provider_error" else "error"
    if st is EpisodeStatus.BUDGET_EXHAUSTED:
        return "budget_exhausted"
    if st is EpisodeStatus.EARLY_STOPPED:
        return "early_stop"
    if st is EpisodeStatus.ERROR:
        return "error"
    hint = (last_info or {}).get("failure")
    if isinstance(hint, str) and hint in FAILURE_CATEGORIES and hint != "success":
        return hint
    if last_mistake is not None and last_mistake in _BY_MISTAKE:
        return _BY_MISTAKE[last_mistake]
    return "wrong_final_answer"
