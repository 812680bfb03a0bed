"""The budget notice: one pure, versioned renderer shared by runtime and training.

Nothing else in budgetmix produces notice text. The controller injects what
:func:`render_notice` returns as an ephemeral message after the latest
observation; the training package puts the very same bytes into the
environment message. Wording is neutral by design: imperative warnings left in
history are known to make agents give up early.

Format ``v1`` (default)::

    Budget (v1): turn 3 of 10, 8 turns left including this one.
    Budget (v1): turn 10 of 10, the final turn.

followed, for each other limited dimension, by `` Tool calls: 4 of 20 used.``
and the like. Format ``v1-compact`` carries the turn facts only, in fewer bytes
(``[budget v1c] turn 3/10, 8 left``), for small models trained from scratch.
Format ``v1-remaining-only`` states only what is left (``Budget (v1r): 8 turns
left including this one.``), for ablations of whether the total matters.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from budgetmix.exceptions import ConfigError
from budgetmix.ledger import LedgerState

__all__ = [
    "DEFAULT_NOTICE_FORMAT",
    "NOTICE_FORMATS",
    "render_notice",
    "with_notice_anthropic",
    "with_notice_openai_chat",
    "with_notice_openai_responses",
]

DEFAULT_NOTICE_FORMAT = "v1"


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.4g}"


_COUNTED = (
    ("tool_calls", "Tool calls"),
    ("input_tokens", "Input tokens"),
    ("output_tokens", "Output tokens"),
    ("total_tokens", "Tokens"),
)


def _other_dimensions(state: LedgerState) -> str:
    lim, used = state.limits, state.used
    parts: list[str] = []
    for dim, label in _COUNTED:
        cap = lim[dim]
        if cap is not None:
            parts.append(f" {label}: {_num(used[dim])} of {_num(cap)} used.")
    cost = lim["cost_usd"]
    if cost is not None:
        parts.append(f" Cost: ${used['cost_usd']:.4f} of ${cost:.4f} used.")
    wall = lim["wall_seconds"]
    if wall is not None:
        parts.append(f" Time: {int(used['wall_seconds'])}s of {_num(wall)}s used.")
    return "".join(parts)


def _render_v1(state: LedgerState) -> str:
    n, total, left = state.turn_number, state.turns_total, state.turns_remaining
    if left <= 1:
        head = f"Budget (v1): turn {n} of {total}, the final turn."
    else:
        head = f"Budget (v1): turn {n} of {total}, {left} turns left including this one."
    return head + _other_dimensions(state)


def _render_v1_compact(state: LedgerState) -> str:
    n, total, left = state.turn_number, state.turns_total, state.turns_remaining
    if left <= 1:
        return f"[budget v1c] turn {n}/{total}, final"
    return f"[budget v1c] turn {n}/{total}, {left} left"


def _render_v1_remaining_only(state: LedgerState) -> str:
    if state.turns_remaining <= 1:
        return "Budget (v1r): the final turn."
    return f"Budget (v1r): {state.turns_remaining} turns left including this one."


#: Registered formats: id -> pure renderer. Adding wording means adding an id.
NOTICE_FORMATS: dict[str, Callable[[LedgerState], str]] = {
    "v1": _render_v1,
    "v1-compact": _render_v1_compact,
    "v1-remaining-only": _render_v1_remaining_only,
}


def render_notice(state: LedgerState, fmt: str = DEFAULT_NOTICE_FORMAT) -> str:
    """Render the notice the model sees for ``state`` in format ``fmt``.

    Deterministic: the same state and format always give the same bytes.

    Raises:
        ConfigError: ``fmt`` is not a registered format id.
    """
    try:
        renderer = NOTICE_FORMATS[fmt]
    except KeyError:
        raise ConfigError(
            f"unknown notice format {fmt!r}; known: {', '.join(sorted(NOTICE_FORMATS))}"
        ) from None
    return renderer(state)


# -- injection: new lists, never mutating the caller's history ----------------------
def with_notice_openai_chat(messages: Sequence[Any], notice: str) -> list[Any]:
    """Chat Completions messages with the notice appended as a user message."""
    return [*messages, {"role": "user", "content": notice}]


def with_notice_openai_responses(input_items: str | Sequence[Any], notice: str) -> list[Any]:
    """Responses API input with the notice appended as a user input message."""
    items: list[Any] = (
        [{"role": "user", "content": input_items}]
        if isinstance(input_items, str)
        else list(input_items)
    )
    items.append({"role": "user", "content": notice})
    return items


def with_notice_anthropic(messages: Sequence[Any], notice: str) -> list[Any]:
    """Anthropic messages with the notice as a text block after the last user content.

    When the last message is a user turn (typically carrying ``tool_result``
    blocks) the notice is appended to a copy of it, as the API requires
    tool results to be the first blocks of the user turn that follows a
    ``tool_use``; otherwise a new user message is added.
    """
    out = list(messages)
    block = {"type": "text", "text": notice}
    if out and isinstance(out[-1], dict) and out[-1].get("role") == "user":
        last = dict(out[-1])
        content = last.get("content")
        if isinstance(content, str):
            last["content"] = [{"type": "text", "text": content}, block]
        else:
            last["content"] = [*(content or []), block]
        out[-1] = last
    else:
        out.append({"role": "user", "content": [block]})
    return out
