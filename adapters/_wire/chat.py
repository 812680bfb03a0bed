"""OpenAI Chat Completions on the wire (``POST .../chat/completions``), and compatible
servers (vLLM, Ollama, ...).

Reading: :func:`read` (a whole ``chat.completion``), :class:`StreamReader`
(``chat.completion.chunk`` events), :func:`model_response` (the built-in loop's view of
a whole response), :data:`FINISH` (finish reasons in neutral words). Writing:
:func:`write_messages` and :func:`write_tools` (the built-in loop's conversation as a
request), :func:`terminal_body` (the transport's own final answer). The request side
the budget reads: :func:`declared_tool` and :func:`answered_calls`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from budgetmix.adapters._wire.common import (
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

#: Finish reasons in neutral words (the first one per neutral word is what a server sends).
FINISH = {
    "stop": "stop",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "length": "length",
}

#: OpenAI ``usage`` field names: input, output, input details (cached tokens are part of
#: the input count).
USAGE_FIELDS = ("prompt_tokens", "completion_tokens", "prompt_tokens_details")


def read_usage(out: ParsedResponse, usage: Any, names: tuple[str, str, str] = USAGE_FIELDS) -> None:
    """OpenAI ``usage`` (Chat Completions by default; Responses passes its own names)."""
    if usage is None:
        return
    out.usage_reported = True
    get = reader(usage)
    inp, outp, details_name = names
    out.input_tokens = usage_count(out, inp, get(usage, inp, None))
    out.output_tokens = usage_count(out, outp, get(usage, outp, None))
    details = get(usage, details_name, None)
    if details is not None:
        cached = field(details, "cached_tokens")
        out.cache_read_tokens = usage_count(out, "cached_tokens", cached) or 0


def read(obj: Any, *, choices: int | None = None) -> ParsedResponse:
    """A whole response: every choice's text, tool calls and finish reason (the first
    ``choices`` only, when given)."""
    get = reader(obj)
    out = ParsedResponse(
        model=as_str(get(obj, "model", None)), response_id=as_str(get(obj, "id", None))
    )
    read_usage(out, get(obj, "usage", None))
    found = as_seq(get(obj, "choices", None))
    if not found:
        out.empty = True
        return out
    for choice in found if choices is None else found[:choices]:
        get = reader(choice)
        reason = get(choice, "finish_reason", None)
        if reason and isinstance(reason, str):
            out.finish_reasons.append(reason)
        message = get(choice, "message", None)
        get = reader(message)
        content = get(message, "content", None)
        if isinstance(content, str):
            out.text += content
        for tc in as_seq(get(message, "tool_calls", None)):
            fn = field(tc, "function")
            out.add_call(field(tc, "id"), field(fn, "name"), field(fn, "arguments", ""))
    out.truncated = "length" in out.finish_reasons
    return out


def model_response(obj: Any) -> ModelResponse:
    """A whole response as the built-in loop's :class:`ModelResponse`: its first choice
    (no choices: ``finish_reason="error"``).

    Arguments that are not JSON text stay unreadable (the loop records
    ``invalid_tool_arguments``)."""
    parsed = read(obj, choices=1)
    if parsed.empty:
        return ModelResponse(
            finish_reason="error", usage=parsed.usage(), model=parsed.model, raw=obj
        )
    return neutral_response(parsed, FINISH, obj)


class StreamReader:
    """Folds ``chat.completion.chunk`` objects; usage comes with the final chunk when the
    request asked for ``stream_options.include_usage``."""

    def __init__(self) -> None:
        self.result = ParsedResponse()
        self._text: list[str] = []  # joined once at the end (no quadratic concatenation)
        # (choice, call) -> [id, name parts, argument parts]: joined once, at the end
        self._calls: dict[tuple[int, int], list[Any]] = {}
        self._seen = False

    def feed(self, chunk: Any) -> None:
        """Fold one chunk in (called per streamed token: keep it lean)."""
        out = self.result
        get = reader(chunk)  # one reader per object: C-level reads of dicts and SDK models
        if out.model is None:
            out.model = as_str(get(chunk, "model", None))
            out.response_id = as_str(get(chunk, "id", None))
        usage = get(chunk, "usage", None)
        if usage is not None:
            read_usage(out, usage)
        for choice in as_seq(get(chunk, "choices", None)):
            self._seen = True
            get = reader(choice)
            delta = get(choice, "delta", None)
            reason = get(choice, "finish_reason", None)
            if reason and isinstance(reason, str):
                out.finish_reasons.append(reason)
            index = as_count(get(choice, "index", None)) or 0
            get = reader(delta)
            content = get(delta, "content", None)
            if isinstance(content, str):
                self._text.append(content)
            calls = get(delta, "tool_calls", None)
            if calls:
                self._fold_calls(index, as_seq(calls))

    def _fold_calls(self, idx: int, calls: Any) -> None:
        for tc in calls:
            key = (idx, as_count(field(tc, "index")) or 0)
            slot = self._calls.get(key)
            if slot is None:
                slot = self._calls[key] = [None, [], []]
            fn = field(tc, "function")
            slot[0] = as_str(field(tc, "id")) or slot[0]
            slot[1].append(as_text(field(fn, "name")))
            slot[2].append(as_text(field(fn, "arguments")))

    def finish(self) -> ParsedResponse:
        """The folded response."""
        out = self.result
        out.text = "".join(self._text)
        for cid, name, args in self._calls.values():
            out.add_call(cid, "".join(name), "".join(args))
        out.empty = not self._seen
        out.truncated = "length" in out.finish_reasons
        return out


# -- the request side ------------------------------------------------------------------
def declared_tool(tool: Any) -> tuple[Any, Any] | None:
    """A declared tool's ``(name, JSON schema)``."""
    fn = field(tool, "function")
    return field(fn, "name"), field(fn, "parameters", {})


def answered_calls(body: Mapping[str, Any]) -> list[ToolResult]:
    """The tool results after the request's last model output, newest first: Chat
    Completions results carry no error flag, so a failure is one worded as such
    (:func:`~budgetmix.adapters._wire.common.reads_as_error`)."""
    found: list[ToolResult] = []
    messages = body.get("messages")
    for message in reversed(messages if isinstance(messages, SEQUENCES) else ()):
        role = field(message, "role")
        if role == "assistant":
            break
        if role == "tool":
            found.append(tool_result(field(message, "tool_call_id"), field(message, "content")))
    return found


def write_messages(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """Neutral messages -> Chat Completions ``messages``."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "tool":
            out.append({"role": "tool", "tool_call_id": m.tool_call_id or "", "content": m.content})
        elif m.role == "assistant" and m.tool_calls:
            out.append(
                {
                    "role": "assistant",
                    "content": m.content or None,
                    "tool_calls": [
                        {
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": c.arguments},
                        }
                        for c in m.tool_calls
                    ],
                }
            )
        else:
            out.append({"role": m.role, "content": m.content})
    return out


def write_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """Neutral tool specs -> Chat Completions ``tools`` (also what chat templates take)."""
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": dict(t.parameters),
            },
        }
        for t in tools
    ]


def terminal_body(model: str, text: str) -> dict[str, Any]:
    """A final assistant message the transport answers with by itself."""
    message = {"role": "assistant", "content": text}
    return {
        "id": "chatcmpl-budgetmix",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


def terminal_stream(model: str, text: str) -> bytes:
    """:func:`terminal_body` as the event stream a ``"stream": true`` request reads:
    ``chat.completion.chunk`` events (the text, the finish reason, the usage), then
    ``[DONE]``."""
    base = {"id": "chatcmpl-budgetmix", "object": "chat.completion.chunk", "created": 0}
    base["model"] = model

    def chunk(choices: list[Any], **extra: Any) -> bytes:
        return sse_event(None, {**base, "choices": choices, **extra})

    delta = {"role": "assistant", "content": text}
    usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    return b"".join(
        (
            chunk([{"index": 0, "delta": delta, "finish_reason": None}]),
            chunk([{"index": 0, "delta": {}, "finish_reason": "stop"}]),
            chunk([], usage=usage),
            sse_event(None, "[DONE]"),
        )
    )


#: Chat Completions as a :class:`~budgetmix.adapters._wire.format.WireFormat`.
FORMAT = WireFormat(
    name="chat",
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
