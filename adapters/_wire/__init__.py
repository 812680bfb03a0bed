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
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal, Protocol

from budgetmix.adapters._wire import anthropic, chat, responses
from budgetmix.adapters._wire.common import ParsedResponse, ToolResult

__all__ = [
    "Accumulator",
    "ParsedResponse",
    "ToolResult",
    "WireKind",
    "accumulator",
    "answered_calls",
    "declared_tool",
    "history_key",
    "parse_response",
    "terminal_body",
    "terminal_stream",
]

WireKind = Literal["chat", "responses", "anthropic"]


class Accumulator(Protocol):
    """A wire format's stream reader: fold each event in, then read the response."""

    def feed(self, event: Any) -> None: ...

    def finish(self) -> ParsedResponse: ...


_READERS: dict[str, Callable[[Any], ParsedResponse]] = {
    "chat": chat.read,
    "responses": responses.read,
    "anthropic": anthropic.read,
}
_STREAMS: dict[str, Callable[[], Accumulator]] = {
    "chat": chat.StreamReader,
    "responses": responses.StreamReader,
    "anthropic": anthropic.StreamReader,
}
_TOOLS: dict[str, Callable[[Any], tuple[Any, Any] | None]] = {
    "chat": chat.declared_tool,
    "responses": responses.declared_tool,
    "anthropic": anthropic.declared_tool,
}
_RESULTS: dict[str, Callable[[Mapping[str, Any]], list[ToolResult]]] = {
    "chat": chat.answered_calls,
    "responses": responses.answered_calls,
    "anthropic": anthropic.answered_calls,
}
_TERMINAL: dict[str, Callable[[str, str], dict[str, Any]]] = {
    "chat": chat.terminal_body,
    "responses": responses.terminal_body,
    "anthropic": anthropic.terminal_body,
}
_TERMINAL_STREAM: dict[str, Callable[[str, str], bytes]] = {
    "chat": chat.terminal_stream,
    "responses": responses.terminal_stream,
    "anthropic": anthropic.terminal_stream,
}


def parse_response(kind: WireKind, obj: Any) -> ParsedResponse:
    """Read a whole (non-streamed) response of ``kind``."""
    return _READERS[kind](obj)


def accumulator(kind: WireKind) -> Accumulator:
    """A fresh stream reader for ``kind``."""
    return _STREAMS[kind]()


def declared_tool(kind: WireKind, tool: Any) -> tuple[Any, Any] | None:
    """A declared tool's ``(name, JSON schema)`` in ``kind``'s shape; ``None``: a hosted
    tool whose calls budgetmix cannot see."""
    return _TOOLS[kind](tool)


def answered_calls(kind: WireKind, body: Mapping[str, Any]) -> list[ToolResult]:
    """The tool results a request of ``kind`` carries after its last model output,
    newest first."""
    return _RESULTS[kind](body)


def history_key(kind: WireKind) -> str:
    """Where a request of ``kind`` keeps its history: ``input`` or ``messages``."""
    return "input" if kind == "responses" else "messages"


def terminal_body(kind: WireKind, model: str, text: str) -> dict[str, Any]:
    """A final assistant message in ``kind``'s shape, for the transport to answer with."""
    return _TERMINAL[kind](model, text)


def terminal_stream(kind: WireKind, model: str, text: str) -> bytes:
    """:func:`terminal_body` as ``kind``'s event stream (``text/event-stream`` bytes), for
    a request that asked for a stream."""
    return _TERMINAL_STREAM[kind](model, text)
