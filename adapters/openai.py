"""Budgets for the OpenAI SDK: wrap the client you already use, keep your loop.

::

    from budgetmix.adapters import budgeted

    client = budgeted(openai.OpenAI(), controller)
    with controller.episode() as ep:
        reply = client.chat.completions.create(model="gpt-4o", messages=history, tools=tools)

Inside an episode, ``chat.completions.create`` and ``responses.create`` (sync,
async, ``stream=True``) charge the turn before anything is sent (a refused turn
raises :class:`~budgetmix.BudgetExhausted` and sends nothing), send the budget
notice appended after the latest message (your ``messages`` list is not
touched), retry transient errors under the controller's :class:`RetryPolicy`
without consuming turns (the SDK's own retries are switched off in the
wrapper), and record usage, cost and mistakes: tool calls with unknown names or
arguments that are not JSON or do not match the tool's schema. A final failure
is a ``provider_error`` mistake and :class:`~budgetmix.ProviderError` raised
``from`` the SDK's exception. Outside an episode the wrapper is transparent;
every other attribute is the client's own.

A plain-JSON history (dicts, lists, strings, numbers: what most loops keep) is sent
through ``extra_body`` without the SDK's per-message request transform, which is the
identity for such data and costs 0.1–0.2 ms per message: the bytes are those the SDK
would send, and a wrapped call takes less client time than an unwrapped one. Code that
patches the SDK's ``create`` (third-party instrumentation) then sees an empty history;
pass ``sdk_transform=True`` when it must see yours.

The SDK's helpers are budgeted the same way: ``parse()`` (structured outputs),
``stream()`` (the SDK's event stream and ``get_final_completion()``, run over the
budgeted ``create(stream=True)``; the turn is charged when the ``with`` block opens
it) and ``with_raw_response.create/parse`` (headers and status kept);
``beta.chat.completions`` is the same budgeted endpoint.

No request path skips the budget. Every other attribute is read from a copy of the
client whose HTTP client sends through the budget's gate (:mod:`budgetmix.adapters._gate`):
inside an episode, whatever reaches ``/chat/completions`` or ``/responses`` that way is
budgeted at the HTTP layer with the same turn, notice, retries, usage and spans:
``with_streaming_response`` (usage read from the body as you read it), the SDK's
low-level ``post`` / ``request`` (LiteLLM sends through ``client.post``), ``with_options``
and ``copy`` (wrapped again). Requests to other endpoints (``models``, ``files``...) pass
through. The legacy ``completions.create``, ``responses.compact`` (a compaction runs a
model) and WebSocket sessions (``responses.connect``, ``realtime.connect``,
``live.connect``), which no wire format here reads, raise
:class:`~budgetmix.ConfigError` inside an episode, before anything is sent.

Tool-call mistakes are recorded with their call ids when the response arrives
(``{m.call_id for m in ep.mistakes}``): answer such calls with an error rather
than recording them again through ``ep.tool_call(...).fail``. The tool results
the next request carries are the outcomes of the previous response's calls: each
call id whose outcome is not known yet counts once as a successful step, which
completes a recovery when mistakes are pending. OpenAI tool results carry no
error flag, so record a tool that failed with
``ep.record_tool_result(call_id, ok=False)`` (or run it through
``ep.tool_call(...)``) before sending its result.

:class:`OpenAIChatModel` is the :class:`~budgetmix.adapters.base.ChatModel`
for :func:`budgetmix.adapters.run_agent` (the loop charges turns itself).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from budgetmix._deps import require
from budgetmix.adapters._endpoints import AsyncEndpoint, ClientWrapper, Endpoint, SyncEndpoint
from budgetmix.adapters._gate import HTTP_INSTEAD, GuardedWrapper, SocketGuard, refuse_in_episode
from budgetmix.adapters._turn import plain_json, send_as_is
from budgetmix.adapters._wire import chat
from budgetmix.adapters.base import (
    Messages,
    ModelRequest,
    ModelResponse,
    Notice,
    SDKChatModel,
    ToolChoice,
    Tools,
)
from budgetmix.notice import with_notice_openai_chat

__all__ = ["AsyncBudgetedOpenAI", "BudgetedOpenAI", "OpenAIChatModel"]


class _Namespace:
    """``client.chat`` with a budgeted ``completions``."""

    def __init__(self, sdk: Any, **children: Any) -> None:
        self._sdk = sdk
        self.__dict__.update(children)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sdk, name)


class _SocketRefusal:
    """``responses.connect()`` (a WebSocket session, which no transport sees): refused
    inside an episode."""

    _owner: ClientWrapper
    _sdk: Any

    def connect(self, *args: Any, **kwargs: Any) -> Any:
        """The SDK's ``responses.connect``; outside an episode only.

        Raises:
            ConfigError: called inside an episode (nothing was sent).
        """
        refuse_in_episode(
            self._owner._target, "responses.connect() (a WebSocket session)", HTTP_INSTEAD
        )
        return self._sdk.connect(*args, **kwargs)


class _SyncResponses(_SocketRefusal, SyncEndpoint):
    """``client.responses``: budgeted, its WebSocket session refused in an episode."""


class _AsyncResponses(_SocketRefusal, AsyncEndpoint):
    """Async twin of :class:`_SyncResponses`."""


class _Wrapper(GuardedWrapper):
    _endpoint_cls: type[Endpoint] = Endpoint
    _responses_cls: type[Endpoint] = Endpoint

    def _attach(self, guarded: Any, raw: Any) -> None:
        ep_cls = self._endpoint_cls
        self.chat = _Namespace(
            guarded.chat,
            completions=ep_cls(self, "chat", guarded.chat.completions, raw.chat.completions),
        )
        self.responses = self._responses_cls(self, "responses", guarded.responses, raw.responses)
        self.realtime = SocketGuard(guarded, self, "realtime")
        self.live = SocketGuard(guarded, self, "live")

    @functools.cached_property
    def beta(self) -> Any:
        """``client.beta``: ``beta.chat`` is the SDK's chat resource again, so the same
        budgeted endpoint; its WebSocket sessions are refused inside an episode. (Looked
        up on first use, as the SDK imports its types then.)"""
        guarded = self._guarded
        return _Namespace(
            guarded.beta,
            chat=self.chat,
            realtime=SocketGuard(guarded.beta, self, "beta.realtime"),
            responses=SocketGuard(guarded.beta, self, "beta.responses"),
        )


class BudgetedOpenAI(_Wrapper):
    """An ``openai.OpenAI`` whose ``chat.completions.create`` and ``responses.create``
    are budgeted inside an episode. Build with :func:`~budgetmix.adapters.budgeted`."""

    _endpoint_cls = SyncEndpoint
    _responses_cls = _SyncResponses


class AsyncBudgetedOpenAI(_Wrapper):
    """The ``openai.AsyncOpenAI`` twin of :class:`BudgetedOpenAI`."""

    _endpoint_cls = AsyncEndpoint
    _responses_cls = _AsyncResponses


# -- ChatModel for the built-in loop ---------------------------------------------------
class OpenAIChatModel(SDKChatModel):
    """A :class:`~budgetmix.adapters.base.ChatModel` (and ``AsyncChatModel``) over Chat
    Completions, for :func:`budgetmix.adapters.run_agent`.

    The loop charges turns and retries; this only translates. SDK errors propagate so
    the loop's retry policy can classify them (the SDK's own retries are off).
    ``tool_choice="none"`` keeps the tools in the request (prompt cache) for the grace turn.
    The messages (plain JSON, built here) go through ``extra_body`` without the SDK's
    per-message request transform, as with :func:`~budgetmix.adapters.budgeted`: the
    same bytes, less client time.

    Args:
        client: an ``openai.OpenAI`` or ``openai.AsyncOpenAI`` (not a budgeted wrapper).
        model: the model name.
        provider_name: ``gen_ai.provider.name`` (``openai``; say ``vllm`` etc. for others).
        request_options: extra ``create`` arguments (``temperature``, ``max_tokens``...).
        sdk_transform: hand the SDK the messages to transform, for code that patches its
            ``create`` and reads them (see :func:`~budgetmix.adapters.budgeted`).

    Raises:
        MissingExtraError: ``openai`` is not installed.
    """

    def __init__(
        self,
        client: Any,
        model: str,
        *,
        provider_name: str = "openai",
        request_options: dict[str, Any] | None = None,
        sdk_transform: bool = False,
    ) -> None:
        require("openai", "openai")
        self._client = client.with_options(max_retries=0)
        self.model_name = model
        self.provider_name = provider_name
        self.request_options = dict(request_options or {})
        self.sdk_transform = sdk_transform

    def request_body(
        self, messages: Messages, tools: Tools, *, notice: Notice, tool_choice: ToolChoice = "auto"
    ) -> dict[str, Any]:
        """The ``create`` arguments for one call (also useful to inspect what is sent)."""
        wire = chat.write_messages(messages)
        body: dict[str, Any] = {
            **self.request_options,
            "model": self.model_name,
            "messages": with_notice_openai_chat(wire, notice) if notice else wire,
        }
        if tools:
            body["tools"] = chat.write_tools(tools)
            if tool_choice == "none":
                body["tool_choice"] = "none"
        return body

    def build_request(self, call: ModelRequest) -> dict[str, Any]:
        """:meth:`request_body` as handed to the SDK: plain-JSON messages ride in
        ``extra_body``."""
        body = self.request_body(
            call.messages, call.tools, notice=call.notice, tool_choice=call.tool_choice
        )
        if not self.sdk_transform and plain_json(body["messages"]):
            send_as_is(body, "messages", sdk_sees=[])
        return body

    def endpoint(self) -> Callable[..., Any]:
        """The client's ``chat.completions.create``."""
        create: Callable[..., Any] = self._client.chat.completions.create
        return create

    def read_reply(self, reply: Any, request: dict[str, Any]) -> ModelResponse:
        """A Chat Completions response -> :class:`ModelResponse` (its first choice)."""
        return chat.model_response(reply)
