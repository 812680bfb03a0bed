"""Provider wire formats, shared by the SDK wrappers, the HTTP transport, the chat models
and the fake server: one module per format reads its responses and writes its requests.

Three formats are understood: OpenAI Chat Completions (``chat``,
:mod:`~budgetmix.adapters._wire.chat`), OpenAI Responses (``responses``,
:mod:`~budgetmix.adapters._wire.responses`) and Anthropic Messages (``anthropic``,
:mod:`~budgetmix.adapters._wire.anthropic`). Each reads a whole response or a stream
into one :class:`ParsedResponse` (usage, finish reasons, text, tool calls as
:class:`~budgetmix.adapters.base.ToolCallRequest`), finds the tool declarations and the
tool results of a request, and writes the transport's own final answer. Nothing here
does I/O or imports a provider SDK (:mod:`~budgetmix.adapters._wire.common` reads dicts
and SDK objects alike).

What a format provides is declared once, :class:`~budgetmix.adapters._wire.format.WireFormat`;
each format module ends with its ``FORMAT``, and :data:`FORMATS` is the one registry the
functions below dispatch through. Adding a format: its module, its line in
:data:`FORMATS` and its name in :data:`WireKind`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from budgetmix.adapters._wire import anthropic, chat, responses
from budgetmix.adapters._wire.common import ParsedResponse, ToolResult
from budgetmix.adapters._wire.format import Accumulator, WireFormat

__all__ = [
    "FORMATS",
    "Accumulator",
    "ParsedResponse",
    "ToolResult",
    "WireFormat",
    "WireKind",
    "accumulator",
    "answered_calls",
    "declared_tool",
    "history_key",
    "parse_response",
    "terminal_body",
    "terminal_stream",
]

#: The formats' names (a new format adds its name here and its line to :data:`FORMATS`).
WireKind = Literal["chat", "responses", "anthropic"]

#: Every wire format, by name: the one registry (adding a format: its module, one line).
FORMATS: Mapping[str, WireFormat] = {
    f.name: f
    for f in (
        chat.FORMAT,
        responses.FORMAT,
        anthropic.FORMAT,
    )
}


def parse_response(kind: WireKind, obj: Any) -> ParsedResponse:
    """Read a whole (non-streamed) response of ``kind``."""
    return FORMATS[kind].read(obj)


def accumulator(kind: WireKind) -> Accumulator:
    """A fresh stream reader for ``kind``."""
    return FORMATS[kind].stream_reader()


def declared_tool(kind: WireKind, tool: Any) -> tuple[Any, Any] | None:
    """A declared tool's ``(name, JSON schema)`` in ``kind``'s shape; ``None``: a hosted
    tool whose calls budgetmix cannot see."""
    return FORMATS[kind].declared_tool(tool)


def answered_calls(kind: WireKind, body: Mapping[str, Any]) -> list[ToolResult]:
    """The tool results a request of ``kind`` carries after its last model output,
    newest first."""
    return FORMATS[kind].answered_calls(body)


def history_key(kind: WireKind) -> str:
    """Where a request of ``kind`` keeps its history: ``input`` or ``messages``."""
    return FORMATS[kind].history_key


def terminal_body(kind: WireKind, model: str, text: str) -> dict[str, Any]:
    """A final assistant message in ``kind``'s shape, for the transport to answer with."""
    return FORMATS[kind].terminal_body(model, text)


def terminal_stream(kind: WireKind, model: str, text: str) -> bytes:
    """:func:`terminal_body` as ``kind``'s event stream (``text/event-stream`` bytes), for
    a request that asked for a stream."""
    return FORMATS[kind].terminal_stream(model, text)
