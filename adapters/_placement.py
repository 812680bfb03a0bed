"""Notice placement ``"observation"`` for histories budgetmix does not keep (the SDK
wrappers and the HTTP transport, shared through :class:`~budgetmix.adapters._turn.TurnRequest`).

With placement ``"observation"`` (:data:`budgetmix.notice.NoticePlacement`) the model
must see every notice where training puts it: appended after
:data:`~budgetmix.notice.NOTICE_SEPARATOR` to the latest observation of its turn (the
last tool result, else the last user message), and still there in every later request.
A framework's history lacks them (it stores what it sent, not what budgetmix added), so
each episode remembers where its notices went (:class:`_Placed`: the message, the block,
the text) and every request gets them back before the new one is placed: the history's
bytes repeat from turn to turn, and the layout is training's. A place whose message
changed kind (the framework rewrote its history) is skipped; a text that already ends
with its notice (a loop that keeps them) is not given it twice.

The observation, per wire: Chat Completions: the turn's last ``tool`` message, else its
last ``user`` message (:func:`budgetmix.notice.observation_index`); Responses: the last
``function_call_output`` (its ``output``), else the last user message; Anthropic: the
last ``tool_result`` block of the turn (its ``content``), else the last user message. A
turn with none gets the notice as a user message of its own, put back in the same place.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from budgetmix.adapters._wire import WireKind
from budgetmix.notice import NOTICE_SEPARATOR, append_notice, observation_index

if TYPE_CHECKING:
    from budgetmix.episode import Episode

__all__ = ["place_observation_notice"]


@dataclass(frozen=True, slots=True)
class _Placed:
    """Where one notice went: ``index`` in the history, ``block`` inside that message's
    content (an Anthropic ``tool_result``; ``None``: the message's own content),
    ``kind`` the role or type found there, ``own``: a message of its own, inserted."""

    index: int
    block: int | None
    kind: str
    notice: str
    own: bool = False


_PLACED: weakref.WeakKeyDictionary[Episode, list[_Placed]] = weakref.WeakKeyDictionary()


def place_observation_notice(
    episode: Episode, kind: WireKind, history: str | Sequence[Any], notice: str | None
) -> list[Any]:
    """``history`` (a new list) with the episode's earlier notices back in their places
    and ``notice`` (``None``: none this turn) in the turn's latest observation."""
    items: list[Any] = (
        [{"role": "user", "content": history}] if isinstance(history, str) else list(history)
    )
    placed = _PLACED.setdefault(episode, [])
    for where in placed:
        items = _put_back(kind, items, where)
    if notice:
        where = _observation(kind, items, notice)
        placed.append(where)
        items = _put_back(kind, items, where)
    return items


# -- where the observation is ----------------------------------------------------------
def _role(item: Any) -> str:
    if not isinstance(item, dict):
        return ""
    role = item.get("role")
    if isinstance(role, str):
        return role
    kind = item.get("type")
    if kind in ("function_call", "reasoning"):
        return "assistant"  # the model's output, in Responses
    return "tool" if kind == "function_call_output" else ""


def _observation(kind: WireKind, items: list[Any], notice: str) -> _Placed:
    roles = [_role(item) for item in items]
    index = observation_index(roles)
    if index is None:
        return _Placed(len(items), None, "user", notice, own=True)
    block = None
    if kind == "anthropic":
        index, block = _anthropic_observation(items, roles, index)
    item = items[index]
    found = item.get("type") if kind == "responses" and roles[index] == "tool" else roles[index]
    return _Placed(index, block, str(found), notice)


def _anthropic_observation(items: list[Any], roles: list[str], last_user: int) -> tuple[int, Any]:
    """The last ``tool_result`` block of the turn, else the last user message."""
    start = max((i + 1 for i, role in enumerate(roles) if role == "assistant"), default=0)
    for i in range(len(items) - 1, start - 1, -1):
        content = items[i].get("content") if roles[i] == "user" else None
        if isinstance(content, list):
            for j in range(len(content) - 1, -1, -1):
                if isinstance(content[j], dict) and content[j].get("type") == "tool_result":
                    return i, j
    return last_user, None


# -- putting a notice (back) in its place ----------------------------------------------
def _put_back(kind: WireKind, items: list[Any], where: _Placed) -> list[Any]:
    if where.own:
        if where.index <= len(items):
            own: dict[str, Any] = {"role": "user", "content": where.notice}
            if kind == "anthropic":
                own = {"role": "user", "content": [{"type": "text", "text": where.notice}]}
            if where.index == len(items) or items[where.index] != own:
                items = [*items[: where.index], own, *items[where.index :]]
        return items
    if where.index >= len(items):
        return items
    item = items[where.index]
    found = _role(item)
    if kind == "responses" and found == "tool":
        found = item.get("type", "")
    if found != where.kind:
        return items  # the framework rewrote its history here: nothing to put back
    out = list(items)
    out[where.index] = _with_notice(kind, item, where)
    return out


def _with_notice(kind: WireKind, item: dict[str, Any], where: _Placed) -> dict[str, Any]:
    if kind == "responses" and where.kind == "function_call_output":
        return {**item, "output": _into(item.get("output"), where.notice, "input_text")}
    if kind == "anthropic" and where.block is not None:
        content = list(item.get("content") or [])
        if where.block < len(content) and isinstance(content[where.block], dict):
            block = content[where.block]
            content[where.block] = {**block, "content": _into(block.get("content"), where.notice)}
        return {**item, "content": content}
    text_type = "input_text" if kind == "responses" else "text"
    return {**item, "content": _into(item.get("content"), where.notice, text_type)}


def _into(content: Any, notice: str, text_type: str = "text") -> Any:
    """``content`` (a string, or a list of parts) with ``notice`` appended, once."""
    ending = NOTICE_SEPARATOR + notice
    if isinstance(content, str) or content is None:
        text = content or ""
        return text if text.endswith(ending) else append_notice(text, notice)
    parts = list(content)
    last = parts[-1] if parts else None
    if isinstance(last, dict) and last.get("type") in ("text", "input_text"):
        text = str(last.get("text", ""))
        if not text.endswith(ending):
            parts[-1] = {**last, "text": append_notice(text, notice)}
    else:
        parts.append({"type": text_type, "text": append_notice("", notice)})
    return parts
