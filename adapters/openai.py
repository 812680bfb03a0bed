"""Budgets for the OpenAI SDK: wrap the client you already use, keep your loop.

::

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

The SDK's helpers are budgeted the same way: ``parse()`` (structured outputs),
``stream()`` (the SDK's event stream and ``get_final_completion()``, run over the
budgeted ``create(stream=True)``; the turn is charged when the ``with`` block opens
it) and ``with_raw_response.create/parse`` (headers and status kept). Only
``with_streaming_response``, whose raw body the caller reads, raises
:class:`~budgetmix.BudgetmixError` inside an episode: use
:mod:`budgetmix.adapters.http`, which sees every byte.

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

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, overload

from budgetmix.adapters._openai_helpers import (
    AsyncHelperStreamManager,
    AsyncRawResponses,
    HelperResource,
    HelperStreamManager,
    RawResponses,
    RecordingRawResponse,
)
from budgetmix.adapters._streams import AsyncRecordingStream, RecordingStream
from budgetmix.adapters._turn import TurnRequest
from budgetmix.adapters._wire import (
    WireKind,
    as_format_error,
    field,
    neutral_usage,
    parse_response,
)
from budgetmix.adapters.base import ChatMessage, ModelResponse, ToolCallRequest, ToolSpec
from budgetmix.adapters.pricing import DEFAULT_PRICING, Pricing
from budgetmix.controller import BudgetController, current_episode
from budgetmix.episode import Episode
from budgetmix.exceptions import BudgetmixError, MissingExtraError, ProviderError
from budgetmix.notice import with_notice_openai_chat

if TYPE_CHECKING:
    import openai

__all__ = [
    "AsyncBudgetedOpenAI",
    "BudgetedOpenAI",
    "OpenAIChatModel",
    "budgeted",
    "resolve_episode",
]

Target = Episode | BudgetController | None
SyncSleep = Callable[[float], None]
AsyncSleep = Callable[[float], Awaitable[None]]


def _require_openai() -> Any:
    try:
        import openai
    except ImportError as exc:  # pragma: no cover - exercised without the extra
        raise MissingExtraError("openai", "openai") from exc
    return openai


def resolve_episode(target: Target) -> Episode | None:
    """The episode a wrapped call charges: ``target`` itself, the current episode of
    ``target`` (a controller), or any current episode (``None``); ``None`` = no budget."""
    if isinstance(target, Episode):
        return target
    ep = current_episode()
    if ep is None or (isinstance(target, BudgetController) and ep.controller is not target):
        return None
    return ep


class _Endpoint:
    """One endpoint (``chat.completions``, ``responses``): ``create``, ``parse``, ``stream``
    and ``with_raw_response`` budgeted; every other attribute is the SDK's."""

    def __init__(self, owner: _Wrapper, kind: WireKind, sdk: Any, raw: Any) -> None:
        self._owner, self._kind, self._sdk, self._raw = owner, kind, sdk, raw

    def _start(self, kwargs: dict[str, Any]) -> TurnRequest | None:
        ep = resolve_episode(self._owner._target)
        if ep is None:
            return None
        req = TurnRequest(ep, self._kind, kwargs, self._owner._pricing)
        if req.body.get("stream") is True and self._kind == "chat":
            # usage arrives in a final chunk only when asked for
            opts = req.body.get("stream_options")
            req.body["stream_options"] = {
                **(opts if isinstance(opts, dict) else {}),
                "include_usage": True,
            }
        return req

    def __getattr__(self, name: str) -> Any:
        if name in _UNBUDGETED and resolve_episode(self._owner._target) is not None:
            # the raw body stream is the caller's to read: refuse rather than not enforce
            raise BudgetmixError(
                f"{name} is not budgeted by budgetmix; inside an episode use create(), "
                "stream(), with_raw_response, or the httpx BudgetTransport, which sees it all"
            )
        return getattr(self._sdk, name)

    def _finish(self, req: TurnRequest, result: Any, *, is_async: bool) -> Any:
        if req.body.get("stream") is True:
            return AsyncRecordingStream(result, req) if is_async else RecordingStream(result, req)
        req.finish(parse_response(self._kind, result))
        return result

    def _finish_raw(self, req: TurnRequest, raw: Any, *, is_async: bool) -> Any:
        if req.body.get("stream") is True:
            return RecordingRawResponse(raw, lambda s: self._finish(req, s, is_async=is_async))
        self._finish(req, raw.parse(), is_async=is_async)  # parse() caches: the caller's is free
        return raw


_UNBUDGETED = frozenset({"with_streaming_response"})


class _SyncEndpoint(_Endpoint):
    def create(self, **kwargs: Any) -> Any:
        """The SDK's ``create``, budgeted (see the module docstring).

        Raises:
            BudgetExhausted, EarlyStopped: the turn was refused; nothing was sent.
            ConfigError: a cost limit is set and the model has no known price.
            ProviderError: the call failed after retries.
        """
        req = self._start(kwargs)
        if req is None:
            return self._sdk.create(**kwargs)
        return self._finish(req, self._send(req, self._raw.create), is_async=False)

    def parse(self, **kwargs: Any) -> Any:
        """The SDK's ``parse`` (structured outputs), budgeted like :meth:`create`."""
        req = self._start(kwargs)
        if req is None:
            return self._sdk.parse(**kwargs)
        return self._finish(req, self._send(req, self._raw.parse), is_async=False)

    def stream(self, **kwargs: Any) -> Any:
        """The SDK's ``stream()`` helper, run over the budgeted ``create(stream=True)``:
        the turn is charged when the ``with`` block opens the stream; usage is recorded
        when it ends (or what arrived, when the block is left early)."""
        resource = HelperResource(self)
        return HelperStreamManager(type(self._sdk).stream(resource, **kwargs), resource)

    @property
    def with_raw_response(self) -> RawResponses:
        """The SDK's ``with_raw_response``: ``create``/``parse`` return its raw response
        (headers, status), budgeted; a streamed one's ``parse()`` records as it is read."""
        return RawResponses(self)

    def _send(self, req: TurnRequest, method: Callable[..., Any]) -> Any:
        sent = req.sdk_kwargs()
        try:
            return req.turn.call(lambda: method(**sent), sleep=self._owner._sleep)
        except ProviderError as exc:
            raise as_format_error(exc) from exc.__cause__

    def _raw_call(self, name: str, kwargs: dict[str, Any]) -> Any:
        req = self._start(kwargs)
        if req is None:
            return getattr(self._sdk.with_raw_response, name)(**kwargs)
        raw = self._send(req, getattr(self._raw.with_raw_response, name))
        return self._finish_raw(req, raw, is_async=False)


class _AsyncEndpoint(_Endpoint):
    async def create(self, **kwargs: Any) -> Any:
        """The SDK's async ``create``, budgeted (see :meth:`_SyncEndpoint.create`)."""
        req = self._start(kwargs)
        if req is None:
            return await self._sdk.create(**kwargs)
        return self._finish(req, await self._send(req, self._raw.create), is_async=True)

    async def parse(self, **kwargs: Any) -> Any:
        """The SDK's async ``parse``, budgeted like :meth:`create`."""
        req = self._start(kwargs)
        if req is None:
            return await self._sdk.parse(**kwargs)
        return self._finish(req, await self._send(req, self._raw.parse), is_async=True)

    def stream(self, **kwargs: Any) -> Any:
        """The SDK's ``stream()`` helper over the budgeted ``create`` (``async with``)."""
        resource = HelperResource(self)
        return AsyncHelperStreamManager(type(self._sdk).stream(resource, **kwargs), resource)

    @property
    def with_raw_response(self) -> AsyncRawResponses:
        """Async twin of :attr:`_SyncEndpoint.with_raw_response`."""
        return AsyncRawResponses(self)

    async def _send(self, req: TurnRequest, method: Callable[..., Awaitable[Any]]) -> Any:
        sent = req.sdk_kwargs()
        try:
            return await req.turn.acall(lambda: method(**sent), sleep=self._owner._sleep)
        except ProviderError as exc:
            raise as_format_error(exc) from exc.__cause__

    async def _raw_call(self, name: str, kwargs: dict[str, Any]) -> Any:
        req = self._start(kwargs)
        if req is None:
            return await getattr(self._sdk.with_raw_response, name)(**kwargs)
        raw = await self._send(req, getattr(self._raw.with_raw_response, name))
        return self._finish_raw(req, raw, is_async=True)


class _Namespace:
    """``client.chat`` with a budgeted ``completions``."""

    def __init__(self, sdk: Any, **children: Any) -> None:
        self._sdk = sdk
        self.__dict__.update(children)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sdk, name)


class _Wrapper:
    _endpoint_cls: type[_Endpoint] = _Endpoint

    def __init__(self, client: Any, target: Target, *, pricing: Pricing | None, sleep: Any) -> None:
        self._client = client
        self._target = target
        self._pricing = pricing if pricing is not None else DEFAULT_PRICING
        self._sleep = sleep
        # our RetryPolicy governs; SDK retries would hide failures and double the waiting
        raw = client.with_options(max_retries=0)
        ep_cls = self._endpoint_cls
        self.chat = _Namespace(
            client.chat,
            completions=ep_cls(self, "chat", client.chat.completions, raw.chat.completions),
        )
        self.responses = ep_cls(self, "responses", client.responses, raw.responses)

    @property
    def unwrapped(self) -> Any:
        """The client this wraps."""
        return self._client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


class BudgetedOpenAI(_Wrapper):
    """An ``openai.OpenAI`` whose ``chat.completions.create`` and ``responses.create``
    are budgeted inside an episode. Build with :func:`budgeted`."""

    _endpoint_cls = _SyncEndpoint


class AsyncBudgetedOpenAI(_Wrapper):
    """The ``openai.AsyncOpenAI`` twin of :class:`BudgetedOpenAI`."""

    _endpoint_cls = _AsyncEndpoint


@overload
def budgeted(
    client: openai.AsyncOpenAI,
    target: Target = ...,
    *,
    pricing: Pricing | None = ...,
    sleep: AsyncSleep | None = ...,
) -> AsyncBudgetedOpenAI: ...
@overload
def budgeted(
    client: openai.OpenAI,
    target: Target = ...,
    *,
    pricing: Pricing | None = ...,
    sleep: SyncSleep | None = ...,
) -> BudgetedOpenAI: ...
def budgeted(
    client: openai.OpenAI | openai.AsyncOpenAI,
    target: Target = None,
    *,
    pricing: Pricing | None = None,
    sleep: SyncSleep | AsyncSleep | None = None,
) -> BudgetedOpenAI | AsyncBudgetedOpenAI:
    """Wrap an OpenAI client so calls inside an episode are budgeted.

    Args:
        client: an ``openai.OpenAI`` or ``openai.AsyncOpenAI`` (or a compatible server's).
        target: the :class:`Episode` to charge, a :class:`BudgetController` (its current
            episode), or ``None`` (whatever episode is current).
        pricing: prices for cost (default :data:`DEFAULT_PRICING`).
        sleep: waits between retries (tests inject a recorder).

    Raises:
        MissingExtraError: ``openai`` is not installed.
    """
    sdk = _require_openai()
    if isinstance(client, sdk.AsyncOpenAI):
        return AsyncBudgetedOpenAI(client, target, pricing=pricing, sleep=sleep)
    return BudgetedOpenAI(client, target, pricing=pricing, sleep=sleep)


# -- ChatModel for the built-in loop ---------------------------------------------------
def chat_messages(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """Neutral messages -> Chat Completions messages."""
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


def chat_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """Neutral tool specs -> Chat Completions ``tools``."""
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


_FINISH = {
    "stop": "stop",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "length": "length",
}


def chat_response(obj: Any) -> ModelResponse:
    """A Chat Completions response -> :class:`ModelResponse` (empty choices -> ``error``)."""
    choices = field(obj, "choices", [])
    usage = neutral_usage("chat", field(obj, "usage"))
    if not choices:
        return ModelResponse(finish_reason="error", usage=usage, model=field(obj, "model"), raw=obj)
    choice = choices[0]
    message = field(choice, "message")
    calls = tuple(
        ToolCallRequest(
            id=str(field(tc, "id", "")),
            name=str(field(field(tc, "function"), "name", "")),
            arguments=str(field(field(tc, "function"), "arguments", "")),
        )
        for tc in field(message, "tool_calls", [])
    )
    reason = _FINISH.get(str(field(choice, "finish_reason", "stop")), "stop")
    if calls and reason == "stop":
        reason = "tool_calls"
    return ModelResponse(
        text=str(field(message, "content", "") or ""),
        tool_calls=calls,
        finish_reason=reason,
        usage=usage,
        model=field(obj, "model"),
        raw=obj,
    )


class OpenAIChatModel:
    """A :class:`~budgetmix.adapters.base.ChatModel` (and ``AsyncChatModel``) over Chat
    Completions, for :func:`budgetmix.adapters.run_agent`.

    The loop charges turns and retries; this only translates. SDK errors propagate so
    the loop's retry policy can classify them (the SDK's own retries are off).
    ``tool_choice="none"`` keeps the tools in the request (prompt cache) for the grace turn.

    Args:
        client: an ``openai.OpenAI`` or ``openai.AsyncOpenAI`` (not a budgeted wrapper).
        model: the model name.
        provider_name: ``gen_ai.provider.name`` (``openai``; say ``vllm`` etc. for others).
        request_options: extra ``create`` arguments (``temperature``, ``max_tokens``...).
    """

    def __init__(
        self,
        client: Any,
        model: str,
        *,
        provider_name: str = "openai",
        request_options: dict[str, Any] | None = None,
    ) -> None:
        _require_openai()
        self._client = client.with_options(max_retries=0)
        self.model_name = model
        self.provider_name = provider_name
        self.request_options = dict(request_options or {})

    def request_body(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
        *,
        notice: str | None,
        tool_choice: Literal["auto", "none"] = "auto",
    ) -> dict[str, Any]:
        """The ``create`` arguments for one call (also useful to inspect what is sent)."""
        wire = chat_messages(messages)
        body: dict[str, Any] = {
            **self.request_options,
            "model": self.model_name,
            "messages": with_notice_openai_chat(wire, notice) if notice else wire,
        }
        if tools:
            body["tools"] = chat_tools(tools)
            if tool_choice == "none":
                body["tool_choice"] = "none"
        return body

    def complete(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
        *,
        notice: str | None,
        tool_choice: Literal["auto", "none"] = "auto",
    ) -> ModelResponse:
        """One Chat Completions call."""
        body = self.request_body(messages, tools, notice=notice, tool_choice=tool_choice)
        return chat_response(self._client.chat.completions.create(**body))

    async def acomplete(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
        *,
        notice: str | None,
        tool_choice: Literal["auto", "none"] = "auto",
    ) -> ModelResponse:
        """One async Chat Completions call (needs an ``AsyncOpenAI`` client)."""
        body = self.request_body(messages, tools, notice=notice, tool_choice=tool_choice)
        return chat_response(await self._client.chat.completions.create(**body))
