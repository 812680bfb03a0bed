"""What a wire format provides, declared once: :class:`WireFormat`.

Each format module (``chat.py``, ``responses.py``, ``anthropic.py``) ends with one
``FORMAT = WireFormat(...)`` built from its own functions, and
:data:`budgetmix.adapters._wire.FORMATS` lists them; the transport, the SDK wrappers,
the tool checks and the fake server reach a format only through its ``WireFormat``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from budgetmix.adapters._wire.common import ParsedResponse, ToolResult
    from budgetmix.adapters.base import ChatMessage, ModelResponse, ToolSpec

__all__ = ["Accumulator", "WireFormat"]


class Accumulator(Protocol):
    """A wire format's stream reader: fold each event in, then read the response."""

    def feed(self, event: Any) -> None: ...

    def finish(self) -> ParsedResponse: ...


@dataclass(frozen=True, slots=True)
class WireFormat:
    """One wire format's reader, writer and request-side facts.

    Attributes:
        name: the format's name (``"chat"``, ``"responses"``, ``"anthropic"``), also its
            key in :data:`~budgetmix.adapters._wire.FORMATS`.
        history_key: where a request keeps its history (``messages`` / ``input``).
        read: a whole (non-streamed) response into a :class:`ParsedResponse`.
        stream_reader: a fresh :class:`Accumulator` for the format's event stream.
        finish: the finish (stop, status) reasons in neutral words (``stop``,
            ``tool_calls``, ``length``, ``error``); the first wire word per neutral
            word is what a server sends.
        declared_tool: a declared tool's ``(name, JSON schema)``; ``None`` for a hosted
            tool whose calls budgetmix cannot see.
        answered_calls: the tool results a request carries after its last model output,
            newest first.
        terminal_body: the transport's own final assistant message ``(model, text)``.
        terminal_stream: :attr:`terminal_body` as ``text/event-stream`` bytes.
        model_response: a whole response as the built-in loop's :class:`ModelResponse`;
            ``None`` when the built-in loop does not speak the format.
        write_messages: the built-in loop's conversation as the format's history (chat:
            a message list; anthropic: ``(system, messages)``); ``None`` as above.
        write_tools: neutral tool specs as the format's ``tools``; ``None`` as above.
    """

    name: str
    history_key: str
    read: Callable[[Any], ParsedResponse]
    stream_reader: Callable[[], Accumulator]
    finish: Mapping[str, str]
    declared_tool: Callable[[Any], tuple[Any, Any] | None]
    answered_calls: Callable[[Mapping[str, Any]], list[ToolResult]]
    terminal_body: Callable[[str, str], dict[str, Any]]
    terminal_stream: Callable[[str, str], bytes]
    model_response: Callable[[Any], ModelResponse] | None = None
    write_messages: Callable[[Sequence[ChatMessage]], object] | None = None
    write_tools: Callable[[Sequence[ToolSpec]], list[dict[str, Any]]] | None = None
