"""OpenAI Responses on the wire (``POST .../responses``).

Reading: :func:`read` (a whole ``response``) and :class:`StreamReader` (its streaming
events; the terminal one carries the whole response). Writing: :func:`terminal_body`
(the transport's own final answer). The request side the budget reads:
:func:`declared_tool` and :func:`answered_calls`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from budgetmix.adapters._wire.chat import read_usage
from budgetmix.adapters._wire.common import (
    SEQUENCES,
    ParsedResponse,
    ToolResult,
    as_seq,
    as_str,
    as_text,
    field,
    sse_event,
    tool_result,
)
from budgetmix.adapters._wire.format import WireFormat

__all__ = [
    "FINISH",
    "FORMAT",
    "StreamReader",
    "answered_calls",
    "declared_tool",
    "read",
    "terminal_body",
    "terminal_stream",
]

#: Response statuses in neutral words (a function call still ends ``completed``).
FINISH = {"completed": "stop", "incomplete": "length", "failed": "error"}

#: ``usage`` field names: input, output, input details (cached tokens are part of input).
USAGE_FIELDS = ("input_tokens", "output_tokens", "input_tokens_details")


def read(obj: Any) -> ParsedResponse:
    """A whole response (``object: response``)."""
    out = ParsedResponse(model=as_str(field(obj, "model")), response_id=as_str(field(obj, "id")))
    read_usage(out, field(obj, "usage"), USAGE_FIELDS)
    status = field(obj, "status")
    if status and isinstance(status, str):
        out.finish_reasons.append(status)
    reason = field(field(obj, "incomplete_details"), "reason")
    out.truncated = reason == "max_output_tokens"
    items = as_seq(field(obj, "output"))
    out.empty = not items
    for item in items:
        kind = field(item, "type")
        if kind == "function_call":
            out.add_call(field(item, "call_id"), field(item, "name"), field(item, "arguments", ""))
        elif kind == "message":
            for part in as_seq(field(item, "content")):
                if field(part, "type") == "output_text":
                    out.text += as_text(field(part, "text"))
    return out


class StreamReader:
    """Folds Responses streaming events; the terminal ``response.completed`` (or
    ``.incomplete`` / ``.failed``) event carries the whole response with usage."""

    _TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})

    def __init__(self) -> None:
        self._final: Any = None
        self._text: list[str] = []

    def feed(self, event: Any) -> None:
        """Fold one event in."""
        kind = as_str(field(event, "type"))
        if kind in self._TERMINAL:
            self._final = field(event, "response")
        elif kind == "response.output_text.delta":
            self._text.append(as_text(field(event, "delta")))

    def finish(self) -> ParsedResponse:
        """The folded response (from the terminal event when one arrived)."""
        if self._final is not None:
            return read(self._final)
        return ParsedResponse(text="".join(self._text), empty=not self._text)


# -- the request side ------------------------------------------------------------------
def declared_tool(tool: Any) -> tuple[Any, Any] | None:
    """A declared function tool's ``(name, JSON schema)``; ``None`` for a hosted tool
    (web search, file search...), whose calls budgetmix cannot see."""
    if field(tool, "type") != "function":
        return None
    return field(tool, "name"), field(tool, "parameters", {})


def answered_calls(body: Mapping[str, Any]) -> list[ToolResult]:
    """The function call outputs after the request's last model output, newest first:
    Responses outputs carry no error flag, so a failure is one worded as such."""
    found: list[ToolResult] = []
    items = body.get("input")
    for item in reversed(items if isinstance(items, SEQUENCES) else ()):
        kind = field(item, "type")
        if kind == "function_call" or field(item, "role") == "assistant":
            break
        if kind == "function_call_output":
            found.append(tool_result(field(item, "call_id"), field(item, "output")))
    return found


def terminal_body(model: str, text: str) -> dict[str, Any]:
    """A final assistant message the transport answers with by itself."""
    part = {"type": "output_text", "text": text, "annotations": []}
    item = {"type": "message", "id": "msg_budgetmix", "status": "completed"}
    usage = {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
    return {
        "id": "resp_budgetmix",
        "object": "response",
        "created_at": 0,
        "status": "completed",
        "model": model,
        "output": [{**item, "role": "assistant", "content": [part]}],
        "parallel_tool_calls": False,
        "tool_choice": "none",
        "tools": [],
        "usage": {
            **usage,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


def terminal_stream(model: str, text: str) -> bytes:
    """:func:`terminal_body` as the event stream a ``"stream": true`` request reads:
    ``response.created``, the message item's added / text delta / done events, and
    ``response.completed`` carrying the whole response."""
    final = terminal_body(model, text)
    item = final["output"][0]
    part = item["content"][0]
    where = {"item_id": item["id"], "output_index": 0, "content_index": 0}
    started = {**final, "status": "in_progress", "output": [], "usage": None}
    events: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": started}),
        ("response.in_progress", {"response": started}),
        (
            "response.output_item.added",
            {"output_index": 0, "item": {**item, "status": "in_progress", "content": []}},
        ),
        ("response.content_part.added", {**where, "part": {**part, "text": ""}}),
        ("response.output_text.delta", {**where, "delta": text, "logprobs": []}),
        ("response.output_text.done", {**where, "text": text, "logprobs": []}),
        ("response.content_part.done", {**where, "part": part}),
        ("response.output_item.done", {"output_index": 0, "item": item}),
        ("response.completed", {"response": final}),
    ]
    return b"".join(
        sse_event(kind, {"type": kind, "sequence_number": n, **data})
        for n, (kind, data) in enumerate(events)
    )


#: OpenAI Responses as a :class:`~budgetmix.adapters._wire.format.WireFormat` (the
#: built-in loop does not speak it: no loop view, no writer).
FORMAT = WireFormat(
    name="responses",
    history_key="input",
    read=read,
    stream_reader=StreamReader,
    finish=FINISH,
    declared_tool=declared_tool,
    answered_calls=answered_calls,
    terminal_body=terminal_body,
    terminal_stream=terminal_stream,
)
