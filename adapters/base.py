"""The provider-neutral chat model seam used by :func:`budgetmix.adapters.run_agent`.

Every adapter (OpenAI, Anthropic, raw HTTP, local transformers, the scripted
test double) offers a :class:`ChatModel`: one ``complete`` call that takes the
conversation, the tool specs and the notice, and returns a
:class:`ModelResponse`. The loop owns budgets, tools, retries and tracing; the
model only translates to and from its provider's wire format.

The built-in models derive from :class:`ChatModelBase`, which implements ``complete``
and ``acomplete`` once over three steps a model supplies: build the request, send it,
read the reply (only sending differs between sync and async).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, Protocol, TypeVar, runtime_checkable

__all__ = [
    "AsyncChatModel",
    "ChatMessage",
    "ChatModel",
    "ChatModelBase",
    "Messages",
    "ModelRequest",
    "ModelResponse",
    "Notice",
    "SDKChatModel",
    "ToolCallRequest",
    "ToolChoice",
    "ToolSpec",
    "Tools",
    "Usage",
]

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallRequest:
    """A tool call: the one type for calls a model asked for, read from any wire format,
    and for calls a test double scripts. ``arguments`` is the raw JSON text as sent;
    ``id`` is ``""`` when the provider gave none (a fake server then makes one up)."""

    id: str = ""
    name: str
    arguments: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatMessage:
    """One message of the neutral conversation.

    ``tool_calls`` is set on assistant messages that call tools; ``tool_call_id``
    and ``is_error`` on tool results.
    """

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCallRequest, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    is_error: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolSpec:
    """A tool the model may call: name, description and JSON schema of its arguments."""

    name: str
    description: str
    parameters: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens one call used. ``input_tokens`` counts all input the model processed,
    including the ``cache_read_tokens`` and ``cache_write_tokens`` of a provider's
    prompt cache (priced apart)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelResponse:
    """What one model call returned, in neutral form.

    ``finish_reason`` is normalised to ``stop``, ``tool_calls``, ``length`` or
    ``error``; ``usage`` is ``None`` when the provider did not report it.
    """

    text: str = ""
    tool_calls: tuple[ToolCallRequest, ...] = ()
    finish_reason: str = "stop"
    usage: Usage | None = None
    model: str | None = None
    raw: Any = field(default=None, repr=False, compare=False)


#: The parts of one call, as the loop passes them to a chat model.
Messages = Sequence[ChatMessage]
Tools = Sequence[ToolSpec]
Notice = str | None
ToolChoice = Literal["auto", "none"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelRequest:
    """One call's inputs, exactly as the loop sent them (a :class:`ChatModelBase` builds
    its request from it; a scripted model records it)."""

    messages: tuple[ChatMessage, ...]
    tools: tuple[ToolSpec, ...]
    notice: str | None
    tool_choice: ToolChoice

    @property
    def tool_names(self) -> tuple[str, ...]:
        """The names of the tools the call offered."""
        return tuple(t.name for t in self.tools)


@runtime_checkable
class ChatModel(Protocol):
    """A synchronous chat model.

    ``notice`` is the budget notice to inject ephemerally after the latest
    message (in the provider's message shape), or ``None``. ``tool_choice="none"``
    asks for an answer without tool calls while the tool definitions stay in
    the request (grace turn; keeps the provider's prompt cache warm).
    """

    model_name: str
    provider_name: str

    def complete(
        self, messages: Messages, tools: Tools, *, notice: Notice, tool_choice: ToolChoice = "auto"
    ) -> ModelResponse:
        """One model call: the reply to ``messages`` with ``tools`` offered and ``notice`` shown."""


@runtime_checkable
class AsyncChatModel(Protocol):
    """The async twin of :class:`ChatModel`."""

    model_name: str
    provider_name: str

    async def acomplete(
        self, messages: Messages, tools: Tools, *, notice: Notice, tool_choice: ToolChoice = "auto"
    ) -> ModelResponse:
        """One model call, awaited: as :meth:`ChatModel.complete`."""


RequestT = TypeVar("RequestT")
ReplyT = TypeVar("ReplyT")


class ChatModelBase(ABC, Generic[RequestT, ReplyT]):
    """A :class:`ChatModel` and :class:`AsyncChatModel` whose ``complete`` and
    ``acomplete`` are written once: :meth:`build_request` (from the call's
    :class:`ModelRequest`), then :meth:`send` (or :meth:`asend`), then :meth:`read_reply`.

    ``RequestT`` is what a model sends (a provider's ``create`` arguments, a prompt);
    ``ReplyT`` what comes back (an SDK response, generated tokens). :meth:`asend`
    defaults to :meth:`send` in a worker thread, so the event loop keeps running.
    """

    model_name: str
    provider_name: str

    def complete(
        self, messages: Messages, tools: Tools, *, notice: Notice, tool_choice: ToolChoice = "auto"
    ) -> ModelResponse:
        """One call: the conversation, the tools and the notice -> the model's reply."""
        request = self._request(messages, tools, notice, tool_choice)
        return self.read_reply(self.send(request), request)

    async def acomplete(
        self, messages: Messages, tools: Tools, *, notice: Notice, tool_choice: ToolChoice = "auto"
    ) -> ModelResponse:
        """The async twin of :meth:`complete` (it awaits :meth:`asend`)."""
        request = self._request(messages, tools, notice, tool_choice)
        return self.read_reply(await self.asend(request), request)

    def _request(
        self, messages: Messages, tools: Tools, notice: Notice, tool_choice: ToolChoice
    ) -> RequestT:
        call = ModelRequest(
            messages=tuple(messages), tools=tuple(tools), notice=notice, tool_choice=tool_choice
        )
        return self.build_request(call)

    @abstractmethod
    def build_request(self, call: ModelRequest) -> RequestT:
        """What ``call`` sends (its notice injected for this request only)."""

    @abstractmethod
    def send(self, request: RequestT) -> ReplyT:
        """Send ``request``; errors propagate for the loop's retry policy to classify."""

    async def asend(self, request: RequestT) -> ReplyT:
        """Send ``request`` without blocking the event loop."""
        return await asyncio.to_thread(self.send, request)

    @abstractmethod
    def read_reply(self, reply: ReplyT, request: RequestT) -> ModelResponse:
        """``reply`` (to ``request``) in neutral form."""


class SDKChatModel(ChatModelBase[dict[str, Any], Any]):
    """A :class:`ChatModelBase` over a provider SDK: the request is the keyword arguments
    of the SDK's ``create`` (:meth:`endpoint`), sync or async as the client is."""

    @abstractmethod
    def endpoint(self) -> Callable[..., Any]:
        """The SDK's ``create`` to call (looked up per call, so a patched one is used)."""

    def send(self, request: dict[str, Any]) -> Any:
        """One call (errors propagate: the SDK's own retries are off)."""
        return self.endpoint()(**request)

    async def asend(self, request: dict[str, Any]) -> Any:
        """One call through an async client."""
        return await self.endpoint()(**request)
