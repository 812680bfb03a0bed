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
Format ``v1-compact-masked`` is ``v1-compact`` with every number masked
(``[budget v1c] turn #/#, # left``, on the final turn too): the control arm of
the experiment, which sees a notice but cannot read its budget.

Where the notice goes is a policy too, :data:`NoticePlacement` (see docs/layout.md):

* ``"ephemeral"`` (the default, for API models not trained with budgetmix): a
  trailing message for this one request, never stored in the history;
* ``"observation"`` (for models trained with budgetmix, and what training uses):
  appended to the content of the turn's latest observation (its last ``tool``
  message, else the latest ``user`` message) after :data:`NOTICE_SEPARATOR`, and
  kept in the history, so every later request carries the same bytes: the prompt
  prefix stays cache-stable and training and deployment see the same tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from budgetmix.exceptions import ConfigError
from budgetmix.ledger import LedgerState

__all__ = [
    "DEFAULT_NOTICE_FORMAT",
    "DEFAULT_NOTICE_PLACEMENT",
    "NOTICE_FORMATS",
    "NOTICE_PLACEMENTS",
    "NOTICE_SEPARATOR",
    "NoticePlacement",
    "append_notice",
    "observation_index",
    "place_notice_openai_chat",
    "render_notice",
    "with_notice_anthropic",
    "with_notice_openai_chat",
    "with_notice_openai_responses",
]

DEFAULT_NOTICE_FORMAT = "v1"

#: Where the notice goes: a message of its own for one request, or into the observation.
NoticePlacement = Literal["ephemeral", "observation"]
#: Every placement, default first.
NOTICE_PLACEMENTS: tuple[NoticePlacement, ...] = ("ephemeral", "observation")
DEFAULT_NOTICE_PLACEMENT: NoticePlacement = "ephemeral"
#: Between an observation and the notice placed in it: the notice is its last line.
NOTICE_SEPARATOR = "\n"


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


def _render_v1_compact_masked(state: LedgerState) -> str:
    return "[budget v1c] turn #/#, # left"


def _render_v1_remaining_only(state: LedgerState) -> str:
    if state.turns_remaining <= 1:
        return "Budget (v1r): the final turn."
    return f"Budget (v1r): {state.turns_remaining} turns left including this one."


#: Registered formats: id -> pure renderer. Adding wording means adding an id.
NOTICE_FORMATS: dict[str, Callable[[LedgerState], str]] = {
    "v1": _render_v1,
    "v1-compact": _render_v1_compact,
    "v1-compact-masked": _render_v1_compact_masked,
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

    When the last message is a user turn with a list of blocks (typically
    ``tool_result`` blocks) the notice is appended to a copy of it, as the API
    requires tool results to be the first blocks of the user turn that follows a
    ``tool_use``; otherwise (a string content included, which stays a string: the
    next request sends it so, and its bytes must not change between turns, for the
    prompt cache) a new user message is added, which the API joins to the turn.
    """
    out = list(messages)
    block = {"type": "text", "text": notice}
    last = out[-1] if out else None
    if isinstance(last, dict) and last.get("role") == "user":
        content = last.get("content")
        if not isinstance(content, str):
            out[-1] = {**last, "content": [*(content or []), block]}
            return out
    out.append({"role": "user", "content": [block]})
    return out


# -- placement: into the latest observation, kept in the history ---------------------
def append_notice(content: str, notice: str) -> str:
    """``content`` followed by :data:`NOTICE_SEPARATOR` and ``notice`` (placement
    ``"observation"``); the one spelling of a notice-bearing observation."""
    return f"{content}{NOTICE_SEPARATOR}{notice}"


def observation_index(roles: Sequence[str]) -> int | None:
    """Index of the turn's latest observation among messages with these ``roles``.

    The turn is what follows the last ``assistant`` message: its last ``tool``
    message, else its last ``user`` message; ``None`` when the turn holds neither
    (then placement ``"observation"`` adds the notice as a user message of its own).
    """
    start = 0
    for i, role in enumerate(roles):
        if role == "assistant":
            start = i + 1
    turn = list(roles[start:])
    for wanted in ("tool", "user"):
        for i in range(len(turn) - 1, -1, -1):
            if turn[i] == wanted:
                return start + i
    return None


def _with_notice_in_content(content: Any, notice: str) -> Any:
    if isinstance(content, str) or content is None:
        return append_notice(content or "", notice)
    parts = list(content)  # Chat Completions content parts
    last = parts[-1] if parts else None
    if isinstance(last, dict) and last.get("type") == "text":
        parts[-1] = {**last, "text": append_notice(str(last.get("text", "")), notice)}
    else:
        parts.append({"type": "text", "text": append_notice("", notice)})
    return parts


def place_notice_openai_chat(
    messages: Sequence[Any], notice: str, placement: NoticePlacement
) -> list[Any]:
    """Chat Completions ``messages`` carrying ``notice`` where ``placement`` says (a new list).

    ``"ephemeral"``: :func:`with_notice_openai_chat` (a trailing user message).
    ``"observation"``: a copy of the turn's latest observation
    (:func:`observation_index`) with the notice appended to its content
    (:func:`append_notice`; for content parts, to the last text part), or a new
    user message holding the notice when the turn has no observation. Whoever
    keeps the history stores the result, so later requests repeat the same bytes.

    Raises:
        ConfigError: ``placement`` is not one of :data:`NOTICE_PLACEMENTS`.
    """
    if placement == "ephemeral":
        return with_notice_openai_chat(messages, notice)
    if placement != "observation":
        known = ", ".join(NOTICE_PLACEMENTS)
        raise ConfigError(f"unknown notice placement {placement!r}; known: {known}")
    out = list(messages)
    roles = [m.get("role", "") if isinstance(m, dict) else "" for m in out]
    index = observation_index(roles)
    if index is None:
        out.append({"role": "user", "content": notice})
        return out
    out[index] = {
        **out[index],
        "content": _with_notice_in_content(out[index].get("content"), notice),
    }
    return out
