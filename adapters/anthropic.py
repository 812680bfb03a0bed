"""Budgets for the Anthropic SDK: wrap the client you already use, keep your loop.

::

    from budgetmix.adapters import budgeted

    client = budgeted(anthropic.Anthropic(), controller)
    with controller.episode() as ep:
        reply = client.messages.create(model="claude-sonnet-4-6", max_tokens=1024, messages=history)
        with client.messages.stream(model=..., max_tokens=1024, messages=history) as stream:
            final = stream.get_final_message()

Inside an episode, ``messages.create`` (also ``stream=True``), ``messages.stream``,
``messages.parse`` and ``messages.with_raw_response`` charge the turn before anything is
sent (a refused turn raises :class:`~budgetmix.BudgetExhausted`), append the budget
notice as a text block after the last user content (after its ``tool_result`` blocks, as
the API requires), retry transient errors under the controller's retry policy (the SDK's
own retries are off), and record usage, cost and mistakes: ``tool_use`` blocks naming
unknown tools or with input that does not match the tool's ``input_schema``, and each
``tool_result`` with ``is_error: true`` among the results answering the previous
response (a ``tool_error``, once per ``tool_use_id``, skipped when that call's outcome
is already known); the other results count as successful steps, which complete
recoveries. Outside an episode the wrapper is transparent. Every other attribute is
read from a copy of the client whose HTTP client sends through the budget's gate
(:mod:`budgetmix.adapters._gate`): inside an episode whatever reaches ``/v1/messages``
that way (``messages.with_streaming_response``, ``beta.messages``, the SDK's low-level
``post``) is budgeted at the HTTP layer, other endpoints pass through, and the legacy
``/v1/complete`` raises :class:`~budgetmix.ConfigError` before anything is sent.
The SDK's own spans (``anthropic`` 2.x traces each call) are off in the wrapper's copies:
the budget's ``chat`` span, current while the call runs, describes it, and the tokens are
counted once.

A plain-JSON history (dicts, lists, strings, numbers: what most loops keep) is sent
through ``extra_body`` without the SDK's per-message request transform, which is the
identity for such data: the bytes are those the SDK would send. (``anthropic`` 2.14
does that transform cheaply; ``openai`` 3.57 spends 0.1–0.2 ms per message on it.)
Code that patches the SDK's ``create`` (third-party instrumentation) then sees an empty
history; pass ``sdk_transform=True`` when it must see yours.

:class:`AnthropicChatModel` is the :class:`~budgetmix.adapters.base.ChatModel`
for :func:`budgetmix.adapters.run_agent`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from budgetmix._deps import require
from budgetmix.adapters._endpoints import AsyncEndpoint, Endpoint, SyncEndpoint
from budgetmix.adapters._gate import GuardedWrapper
from budgetmix.adapters._turn import TurnRequest
from budgetmix.adapters._wire import anthropic as wire
from budgetmix.adapters.base import (
    Messages,
    ModelRequest,
    ModelResponse,
    Notice,
    SDKChatModel,
    ToolChoice,
    Tools,
)
from budgetmix.notice import with_notice_anthropic

__all__ = ["AnthropicChatModel", "AsyncBudgetedAnthropic", "BudgetedAnthropic"]


class _SyncMessages(SyncEndpoint):
    """``client.messages``: ``create``, ``parse`` and ``with_raw_response`` budgeted as for
    OpenAI; ``stream`` replaces the SDK's helper, which does not go through ``create``."""

    def stream(self, **kwargs: Any) -> Any:
        """The SDK's ``messages.stream`` helper, budgeted: the turn is charged when the
        ``with`` block opens the stream; usage is recorded when it ends or closes."""
        return _StreamManager(self, kwargs)


class _AsyncMessages(AsyncEndpoint):
    """Async twin of :class:`_SyncMessages`."""

    def stream(self, **kwargs: Any) -> Any:
        """The SDK's async ``messages.stream`` helper, budgeted (``async with``)."""
        return _StreamManager(self, kwargs)


class _StreamManager:
    """Replaces ``MessageStreamManager`` and its async twin: opens the budgeted
    ``create(stream=True)`` and hands the SDK's own ``MessageStream`` the recording stream
    (it quacks like the raw stream it wraps: iteration, close, response). Outside an
    episode the SDK's helper runs as it is."""

    def __init__(self, messages: SyncEndpoint | AsyncEndpoint, kwargs: dict[str, Any]) -> None:
        self._messages, self._kwargs = messages, kwargs
        self._passthrough: Any = None
        self._proxy: Any = None

    def _start(self) -> TurnRequest | None:
        req = self._messages._start({**self._kwargs, "stream": True})
        if req is None:
            self._passthrough = self._messages._sdk.stream(**self._kwargs)
        return req

    def __enter__(self) -> Any:
        m = cast(SyncEndpoint, self._messages)
        req = self._start()
        if req is None:
            return self._passthrough.__enter__()
        self._proxy = m._finish(req, m._send(req, m._raw.create), is_async=False)
        from anthropic import NOT_GIVEN
        from anthropic.lib.streaming import MessageStream

        return MessageStream(self._proxy, NOT_GIVEN)

    def __exit__(self, *exc: Any) -> None:
        if self._passthrough is not None:
            self._passthrough.__exit__(*exc)
        elif self._proxy is not None:
            self._proxy.close()

    async def __aenter__(self) -> Any:
        m = cast(AsyncEndpoint, self._messages)
        req = self._start()
        if req is None:
            return await self._passthrough.__aenter__()
        self._proxy = m._finish(req, await m._send(req, m._raw.create), is_async=True)
        from anthropic import NOT_GIVEN
        from anthropic.lib.streaming import AsyncMessageStream

        return AsyncMessageStream(self._proxy, NOT_GIVEN)

    async def __aexit__(self, *exc: Any) -> None:
        if self._passthrough is not None:
            await self._passthrough.__aexit__(*exc)
        elif self._proxy is not None:
            await self._proxy.close()


def _untraced(client: Any) -> Any:
    """A copy of ``client`` with the SDK's own OpenTelemetry spans off (``anthropic``
    2.x traces each call): the budget's ``chat`` span describes the call, and a second
    span with the same tokens would count them twice in a backend. ``client`` itself
    where the SDK has no such option."""
    try:
        return client.with_options(open_telemetry=False)
    except TypeError:  # an SDK without tracing of its own
        return client


class _Wrapper(GuardedWrapper):
    _messages_cls: type[Endpoint] = Endpoint

    def _attach_endpoints(self, client: Any, raw: Any) -> None:
        super()._attach_endpoints(_untraced(client), _untraced(raw))

    def _attach(self, guarded: Any, raw: Any) -> None:
        self.messages = self._messages_cls(self, "anthropic", guarded.messages, raw.messages)


class BudgetedAnthropic(_Wrapper):
    """An ``anthropic.Anthropic`` whose ``messages.create`` / ``messages.stream`` are
    budgeted inside an episode. Build with :func:`~budgetmix.adapters.budgeted`."""

    _messages_cls = _SyncMessages


class AsyncBudgetedAnthropic(_Wrapper):
    """The ``anthropic.AsyncAnthropic`` twin of :class:`BudgetedAnthropic`."""

    _messages_cls = _AsyncMessages


# -- ChatModel for the built-in loop ---------------------------------------------------
class AnthropicChatModel(SDKChatModel):
    """A :class:`~budgetmix.adapters.base.ChatModel` (and ``AsyncChatModel``) over Anthropic
    Messages, for :func:`budgetmix.adapters.run_agent`. The loop charges turns and
    retries; SDK errors propagate for its retry policy (the SDK's own retries are off).

    Args:
        client: an ``anthropic.Anthropic`` or ``anthropic.AsyncAnthropic``.
        model: the model name.
        max_tokens: the required per-call output cap.
        request_options: extra ``create`` arguments (``temperature``...).

    Raises:
        MissingExtraError: ``anthropic`` is not installed.
    """

    def __init__(
        self,
        client: Any,
        model: str,
        *,
        max_tokens: int = 1024,
        provider_name: str = "anthropic",
        request_options: dict[str, Any] | None = None,
    ) -> None:
        require("anthropic", "anthropic")
        self._client = client.with_options(max_retries=0)
        self.model_name = model
        self.provider_name = provider_name
        self.max_tokens = max_tokens
        self.request_options = dict(request_options or {})

    def request_body(
        self, messages: Messages, tools: Tools, *, notice: Notice, tool_choice: ToolChoice = "auto"
    ) -> dict[str, Any]:
        """The ``messages.create`` arguments for one call."""
        system, messages_out = wire.write_messages(messages)
        body: dict[str, Any] = {
            "max_tokens": self.max_tokens,
            **self.request_options,
            "model": self.model_name,
            "messages": with_notice_anthropic(messages_out, notice) if notice else messages_out,
        }
        if system:
            body["system"] = system
        if tools:
            body["tools"] = wire.write_tools(tools)
            if tool_choice == "none":
                body["tool_choice"] = {"type": "none"}
        return body

    def build_request(self, call: ModelRequest) -> dict[str, Any]:
        """:meth:`request_body` (the SDK transforms it, as it does cheaply)."""
        return self.request_body(
            call.messages, call.tools, notice=call.notice, tool_choice=call.tool_choice
        )

    def endpoint(self) -> Callable[..., Any]:
        """The client's ``messages.create``."""
        create: Callable[..., Any] = self._client.messages.create
        return create

    def read_reply(self, reply: Any, request: dict[str, Any]) -> ModelResponse:
        """An Anthropic ``Message`` -> :class:`ModelResponse`."""
        return wire.model_response(reply)
