"""Who knows the id of a tool call a model's response made.

A tool run through budgetmix with no id (``controller.tool(fn)``) may answer a call
that the wire saw too (a framework behind ``budgeted(client)`` or the HTTP transport):
:meth:`Episode.tool_batch <budgetmix.Episode.tool_batch>` asks the registered claimers
for such a call's id, so it is recorded under the model's id, with one span and one
outcome. The adapters' wire reader registers itself (``claim_calls_with``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from budgetmix.episode import Episode

__all__ = ["claim_calls_with", "claimed_ids"]

Claimer = Callable[["Episode", str], "str | None"]
_CLAIMERS: list[Claimer] = []


def claim_calls_with(claimer: Claimer) -> None:
    """Register ``claimer(episode, tool_name)``: the id of the oldest call of that tool
    the episode's last model response made that nothing answered yet, taken off its list
    (``None``: no such call)."""
    if claimer not in _CLAIMERS:
        _CLAIMERS.append(claimer)


def claimed_ids(
    episode: Episode, names: Sequence[str], ids: Sequence[str | None]
) -> Sequence[str | None]:
    """``ids`` with each ``None`` replaced by the id a claimer knows for its tool."""
    if not _CLAIMERS or None not in ids:
        return ids
    return [cid or _claim(episode, name) for name, cid in zip(names, ids, strict=True)]


def _claim(episode: Episode, name: str) -> str | None:
    for claimer in _CLAIMERS:
        call_id = claimer(episode, name)
        if call_id is not None:
            return call_id
    return None
