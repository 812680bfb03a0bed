"""Anthropic Messages on the wire (``POST .../v1/messages``).

Reading: :func:`read` (a whole ``message``), :class:`StreamReader` (its streaming
events), :func:`model_response` (the built-in loop's view of a whole response),
:data:`FINISH` (stop reasons in neutral words). Writing: :func:`write_messages` and
:func:`write_tools` (the built-in loop's conversation as a request),
:func:`terminal_body` (the transport's own final answer). The request side the budget
reads: :func:`declared_tool` and :func:`answered_calls` (``is_error`` results).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from budgetmix.adapters._wire.common import (
    MAX_COUNT,
    SEQUENCES,
    ParsedResponse,
    ToolResult,
    as_count,
    as_seq,
    as_str,
    as_text,
    field,
    neutral_response,
    reader,
    sse_event,
    tool_result,
    usage_count,
)
from budgetmix.adapters._wire.format import WireFormat
from budgetmix.adapters.base import ChatMessage, ModelResponse, ToolSpec

__all__ = [
    "FINISH",
    "FORMAT",
    "StreamReader",
    "answered_calls",
    "declared_tool",
    "model_response",
    "read",
    "read_usage",
    "terminal_body",
    "terminal_stream",
    "write_messages",
    "write_tools",
]

#: Stop reasons in neutral words (the first one per neutral word is what a server sends).
FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
}


def read_usage(out: ParsedResponse, usage: Any) -> None:
    """Anthropic ``usage``: cache reads and writes come on top of ``input_tokens``; all
    three are input the model processed, so all count towards input tokens."""
    if usage is None:
        return
    out.usage_reported = True
    get = reader(usage)
    inp = usage_count(out, "input_tokens", get(usage, "input_tokens", None))
    for name in ("cache_read_input_tokens", "cache_creation_input_tokens"):
        count = usage_count(out, name, get(usage, name, None)) or 0
        if name == "cache_read_input_tokens":
            out.cache_read_tokens = count
        else:
            out.cache_write_tokens = count
    if inp is not None:
        inp += out.cache_read_tokens + out.cache_write_tokens
        if inp >= MAX_COUNT:  # three valid counts, one impossible total: no count either
            out.usage_invalid.append(f"input_tokens with the cache counts={inp}")
            inp = None
    out.input_tokens = inp
    out.output_tokens = usage_count(out, "output_tokens", get(usage, "output_tokens", None))


def read(obj: Any) -> ParsedResponse:
    """A whole response (``type: message``)."""
    out = ParsedResponse(model=as_str(field(obj, "model")), response_id=as_str(field(obj, "id")))
    read_usage(out, field(obj, "usage"))
    reason = field(obj, "stop_reason")
    if reason and isinstance(reason, str):
        out.finish_reasons.append(reason)
    out.truncated = reason == "max_tokens"
    blocks = as_seq(field(obj, "content"))
    out.empty = not blocks and reason != "end_turn"
    for block in blocks:
        kind = field(block, "type")
        if kind == "text":
            out.text += as_text(field(block, "text"))
        elif kind == "tool_use":
            out.add_call(field(block, "id"), field(block, "name"), field(block, "input", {}))
    return out


def model_response(obj: Any) -> ModelResponse:
    """A whole response as the built-in loop's :class:`ModelResponse` (a ``tool_use``
    input object as JSON text)."""
    return neutral_response(read(obj), FINISH, obj)


class StreamReader:
    """Folds Messages streaming events (``message_start`` carries the input usage,
    ``message_delta`` the stop reason and output usage)."""

    def __init__(self) -> None:
        self.result = ParsedResponse()
        self._text: list[str] = []
        self._blocks: dict[int, list[Any]] = {}
        self._started = False

    def feed(self, event: Any) -> None:
        """Fold one event in."""
        out = self.result
        kind = field(event, "type")
        if kind == "message_start":
            self._started = True
            msg = field(event, "message")
            out.model = as_str(field(msg, "model"))
            out.response_id = as_str(field(msg, "id"))
            read_usage(out, field(msg, "usage"))
        elif kind == "content_block_start":
            block = field(event, "content_block")
            self._blocks[as_count(field(event, "index")) or 0] = [
                field(block, "type"),
                as_str(field(block, "id")),
                as_text(field(block, "name")),
                [],  # the input's JSON parts: joined once, at the end
            ]
        elif kind == "content_block_delta":
            delta = field(event, "delta")
            slot = self._blocks.get(as_count(field(event, "index")) or 0)
            dkind = field(delta, "type")
            if dkind == "text_delta":
                self._text.append(as_text(field(delta, "text")))
            elif dkind == "input_json_delta" and slot is not None:
                slot[3].append(as_text(field(delta, "partial_json")))
        elif kind == "message_delta":
            reason = field(field(event, "delta"), "stop_reason")
            if reason and isinstance(reason, str):
                out.finish_reasons.append(reason)
            sent = field(field(event, "usage"), "output_tokens")
            tokens = usage_count(out, "output_tokens", sent)
            if tokens is not None:
                out.output_tokens = tokens

    def finish(self) -> ParsedResponse:
        """The folded response."""
        out = self.result
        out.text = "".join(self._text)
        for kind, cid, name, parts in self._blocks.values():
            if kind == "tool_use":
                out.add_call(cid, name, "".join(parts) or "{}")
        out.empty = not self._started
        out.truncated = "max_tokens" in out.finish_reasons
        return out


# -- the request side ------------------------------------------------------------------
def declared_tool(tool: Any) -> tuple[Any, Any] | None:
    """A declared tool's ``(name, JSON schema)``."""
    return field(tool, "name"), field(tool, "input_schema", {})


def answered_calls(body: Mapping[str, Any]) -> list[ToolResult]:
    """The ``tool_result`` blocks after the request's last model output, newest first:
    ``is_error: true`` is a failure, and so is a result worded as one."""
    found: list[ToolResult] = []
    messages = body.get("messages")
    for message in reversed(messages if isinstance(messages, SEQUENCES) else ()):
        if field(message, "role") == "assistant":
            break
        content = field(message, "content")
        blocks: list[Any] = content if isinstance(content, list) else []
        for block in reversed(blocks):
            if field(block, "type") == "tool_result":
                flagged = bool(field(block, "is_error", False))
                result = field(block, "content", "")
                found.append(tool_result(field(block, "tool_use_id"), result, is_error=flagged))
    return found


def write_messages(messages: Sequence[ChatMessage]) -> tuple[str | None, list[dict[str, Any]]]:
    """Neutral messages -> (``system``, Messages ``messages``); consecutive tool results
    share one user turn, as the API requires."""
    system = [m.content for m in messages if m.role == "system"]
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "system":
            continue
        if m.role == "tool":
            block = {
                "type": "tool_result",
                "tool_use_id": m.tool_call_id or "",
                "content": m.content,
                "is_error": m.is_error,
            }
            last = out[-1] if out else None
            if last is not None and last["role"] == "user" and isinstance(last["content"], list):
                last["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
        elif m.role == "assistant":
            out.append({"role": "assistant", "content": _assistant_blocks(m) or ""})
        else:
            out.append({"role": "user", "content": m.content})
    return ("\n\n".join(system) if system else None), out


def _assistant_blocks(m: ChatMessage) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if m.content:
        blocks.append({"type": "text", "text": m.content})
    for c in m.tool_calls:
        try:
            args = json.loads(c.arguments or "{}")
        except ValueError:
            args = {}  # the API only takes objects; the loop already flagged the call
        if not isinstance(args, dict):
            args = {}
        blocks.append({"type": "tool_use", "id": c.id, "name": c.name, "input": args})
    return blocks


def write_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """Neutral tool specs -> Messages ``tools``."""
    return [
        {"name": t.name, "description": t.description, "input_schema": dict(t.parameters)}
        for t in tools
    ]


def terminal_body(model: str, text: str) -> dict[str, Any]:
    """A final assistant message the transport answers with by itself."""
    return {
        "id": "msg_budgetmix",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 0, "output_tokens": 0},
    }


def terminal_stream(model: str, text: str) -> bytes:
    """:func:`terminal_body` as the event stream a ``"stream": true`` request reads:
    ``message_start``, one text block (start, delta, stop), ``message_delta`` (the stop
    reason) and ``message_stop``."""
    final = terminal_body(model, text)
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"message": {**final, "content": [], "stop_reason": None}}),
        ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": text}}),
        ("content_block_stop", {"index": 0}),
        (
            "message_delta",
            {
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 0},
            },
        ),
        ("message_stop", {}),
    ]
    return b"".join(sse_event(kind, {"type": kind, **data}) for kind, data in events)


#: Anthropic Messages as a :class:`~budgetmix.adapters._wire.format.WireFormat`.
FORMAT = WireFormat(
    name="anthropic",
    history_key="messages",
    read=read,
    stream_reader=StreamReader,
    finish=FINISH,
    declared_tool=declared_tool,
    answered_calls=answered_calls,
    terminal_body=terminal_body,
    terminal_stream=terminal_stream,
    model_response=model_response,
    write_messages=write_messages,
    write_tools=write_tools,
)
