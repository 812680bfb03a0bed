"""Tool calls seen on the wire: outcomes and ``execute_tool`` spans, with no wrapping.

A framework runs its tools itself, out of budgetmix's sight, but the wire shows each
call twice: in the response that makes it (response n: its id, name and arguments) and
in the request that carries its result (request n+1: the same id, and a result that is
flagged as an error, Anthropic's ``is_error``, or worded as one). :func:`calls_received`
notes the calls of each response as it is read; :func:`results_sent` matches the
results of the next request, records each outcome on the episode (a success is a step,
a failure a ``tool_error`` mistake) and has the episode write one ``execute_tool`` span
per call, from the moment response n was read to the moment request n+1 was made.
That is an upper bound on the tool's own time (it includes the framework's work
between the two); ``controller.tool(fn)`` or ``ep.tool_call(...)`` give exact timing,
and a call whose outcome they recorded gets no second span: a call they run with no id
is matched to the oldest waiting call of its tool (:func:`claim_call`, which
:meth:`Episode.tool_batch <budgetmix.Episode.tool_batch>` asks) and recorded under its
id. A failed call's span carries the result's text as its status description.

A framework that sends results back as plain user text (smolagents'
``Observation: ...``, without the call id) answers the calls all at once: when a
request carries no tool result but user text follows the model's last message, the
pending calls end there, their outcome read from that text. Shared by the SDK wrappers
and the HTTP transport (through :class:`~budgetmix.adapters._turn.TurnRequest`).
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from budgetmix.adapters._wire import ParsedResponse, WireKind, answered_calls, history_key
from budgetmix.adapters._wire.common import SEQUENCES, field, result_text, tool_result
from budgetmix.call_claims import claim_calls_with

if TYPE_CHECKING:
    from budgetmix.episode import Episode
    from budgetmix.steps import Turn

__all__ = ["calls_received", "claim_call", "results_sent"]


@dataclass(slots=True, frozen=True)
class _Call:
    """A tool call of the last response, waiting for its result."""

    name: str
    turn: Turn  # the turn whose response made it: its span is the parent
    received_ns: int
    arguments: Any  # kept only when the controller captures content
    problem: str | None  # the mistake recorded when it arrived (invalid arguments...)


# per episode, the calls of its latest response (an episode gone, its calls go too)
_PENDING: weakref.WeakKeyDictionary[Episode, dict[str, _Call]] = weakref.WeakKeyDictionary()


def calls_received(
    episode: Episode, turn: Turn, parsed: ParsedResponse, problems: Mapping[str, str]
) -> None:
    """Note the tool calls of ``turn``'s response, just read (``problems``: call id -> the
    kind of the mistake recorded on arrival)."""
    if not parsed.tool_calls:
        _PENDING.pop(episode, None)
        return
    now = time.time_ns()
    capture = episode.controller.capture_content
    _PENDING[episode] = {
        call.id: _Call(call.name, turn, now, arguments if capture else None, problems.get(call.id))
        for call, arguments in zip(parsed.tool_calls, parsed.call_arguments, strict=True)
        if call.id
    }


def results_sent(episode: Episode, kind: WireKind, body: Mapping[str, Any]) -> None:
    """Record the tool results a request carries (oldest first), before its turn is
    charged: they answer the last response. Each call of that response gets its span;
    a result for a call the wire did not see records the outcome only."""
    results = answered_calls(kind, body)
    pending = _PENDING.pop(episode, None)
    if pending and not results:
        results = _answered_in_text(kind, body, pending)
    now = time.time_ns()
    for result in reversed(results):
        call_id = result.call_id
        if not isinstance(call_id, str) or not call_id:
            continue
        call = pending.pop(call_id, None) if pending else None
        fresh = episode.record_tool_result(
            call_id, ok=result.ok, tool=call.name if call else None, detail=result.detail
        )
        if call is None or not (fresh or call.problem):
            continue  # not seen on the wire, or timed exactly by ep.tool_call already
        call.turn.trace_tool_call(
            call.name,
            call_id,
            start_ns=call.received_ns,
            end_ns=max(now, call.received_ns),
            error=call.problem or (None if result.ok else "tool_error"),
            content=(call.arguments, result.content),
            detail=result.detail,
        )


def claim_call(episode: Episode, name: str) -> str | None:
    """The id of the oldest call of tool ``name`` the last response made and no result has
    answered yet, taken off the wire's list: a recorder that runs the call itself (the
    MCP session wrapper) times and records it exactly, so the wire gives it no second
    span nor a second outcome. ``None``: no such call is waiting."""
    pending = _PENDING.get(episode)
    if not pending:
        return None
    call_id = next((cid for cid, call in pending.items() if call.name == name), None)
    if call_id is not None:
        del pending[call_id]
    return call_id


claim_calls_with(claim_call)  # a call run with no id (controller.tool) takes the wire's


def _answered_in_text(
    kind: WireKind, body: Mapping[str, Any], pending: dict[str, _Call]
) -> list[Any]:
    """The pending calls, answered by the user text after the model's last message (the
    results of a framework that sends them as text), newest first; none when there is
    no such text."""
    history = body.get(history_key(kind))
    texts: list[str] = []
    for item in reversed(history if isinstance(history, SEQUENCES) else ()):
        role = field(item, "role")
        if role == "assistant" or field(item, "type") in ("function_call", "reasoning"):
            break
        if role == "user":
            texts.append(result_text(field(item, "content")))
    text = "\n".join(reversed([t for t in texts if t]))
    if not text:
        return []
    return [tool_result(call_id, text) for call_id in reversed(pending)]
