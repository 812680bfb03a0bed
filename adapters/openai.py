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

A plain-JSON history (dicts, lists, strings, numbers: what most loops keep) is sent
through ``extra_body`` without the SDK's per-message request transform, which is the
identity for such data and costs 0.1–0.2 ms per message: the bytes are those the SDK
would send, and a wrapped call takes less client time than an unwrapped one. Code that
patches the SDK's ``create`` (third-party instrumentation) then sees an empty history;
pass ``sdk_transform=True`` when it must see yours.

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

from budgetmix._deps import require
from budgetmix.adapters._endpoints import (
    AsyncEndpoint,
    ClientWrapper,
    Endpoint,
    SyncEndpoint,
    Target,
    resolve_episode,
)
from budgetmix.adapters._turn import plain_json, send_as_is
from budgetmix.adapters._wire import (
    SEQUENCES,
    as_seq,
    as_str,
    as_text,
    dumps_bounded,
    field,
    neutral_usage,
)
from budgetmix.adapters.base import ChatMessage, ModelResponse, ToolCallRequest, ToolSpec
from budgetmix.adapters.pricing import Pricing
from budgetmix.notice import with_notice_openai_chat

if TYPE_CHECKING:
    import openai

__all__ = [
    "AsyncBudgetedOpenAI",
    "BudgetedOpenAI",
    "OpenAIChatModel",
    "Target",
    "budgeted",
    "resolve_episode",
]

SyncSleep = Callable[[float], None]
AsyncSleep = Callable[[float], Awaitable[None]]


class _Namespace:
    """``client.chat`` with a budgeted ``completions``."""

    def __init__(self, sdk: Any, **children: Any) -> None:
        self._sdk = sdk
        self.__dict__.update(children)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sdk, name)


class _Wrapper(ClientWrapper):
    _endpoint_cls: type[Endpoint] = Endpoint

    def _attach_endpoints(self, client: Any, raw: Any) -> None:
        ep_cls = self._endpoint_cls
        self.chat = _Namespace(
            client.chat,
            completions=ep_cls(self, "chat", client.chat.completions, raw.chat.completions),
        )
        self.responses = ep_cls(self, "responses", client.responses, raw.responses)


class BudgetedOpenAI(_Wrapper):
    """An ``openai.OpenAI`` whose ``chat.completions.create`` and ``responses.create``
    are budgeted inside an episode. Build with :func:`budgeted`."""

    _endpoint_cls = SyncEndpoint


class AsyncBudgetedOpenAI(_Wrapper):
    """The ``openai.AsyncOpenAI`` twin of :class:`BudgetedOpenAI`."""

    _endpoint_cls = AsyncEndpoint


@overload
def budgeted(
    client: openai.AsyncOpenAI,
    target: Target = ...,
    *,
    pricing: Pricing | None = ...,
    sleep: AsyncSleep | None = ...,
    sdk_transform: bool = ...,
) -> AsyncBudgetedOpenAI: ...
@overload
def budgeted(
    client: openai.OpenAI,
    target: Target = ...,
    *,
    pricing: Pricing | None = ...,
    sleep: SyncSleep | None = ...,
    sdk_transform: bool = ...,
) -> BudgetedOpenAI: ...
def budgeted(
    client: openai.OpenAI | openai.AsyncOpenAI,
    target: Target = None,
    *,
    pricing: Pricing | None = None,
    sleep: SyncSleep | AsyncSleep | None = None,
    sdk_transform: bool = False,
) -> BudgetedOpenAI | AsyncBudgetedOpenAI:
    """Wrap an OpenAI client so calls inside an episode are budgeted.

    Args:
        client: an ``openai.OpenAI`` or ``openai.AsyncOpenAI`` (or a compatible server's).
        target: the :class:`Episode` to charge, a :class:`BudgetController` (its current
            episode), or ``None`` (whatever episode is current).
        pricing: prices for cost (default :data:`DEFAULT_PRICING`).
        sleep: waits between retries (tests inject a recorder).
        sdk_transform: hand the SDK your messages to transform, as an unwrapped call
            does. By default a plain-JSON history (dicts, lists, strings, numbers) is
            sent as is, byte for byte what that transform would produce, without its
            cost (0.1–0.2 ms per message). Set it when code that patches the SDK's
            ``create`` (third-party instrumentation) must see the messages.

    Raises:
        MissingExtraError: ``openai`` is not installed.
    """
    sdk = require("openai", "openai")
    if isinstance(client, sdk.AsyncOpenAI):
        return AsyncBudgetedOpenAI(
            client, target, pricing=pricing, sleep=sleep, sdk_transform=sdk_transform
        )
    return BudgetedOpenAI(client, target, pricing=pricing, sleep=sleep, sdk_transform=sdk_transform)


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
    """A Chat Completions response -> :class:`ModelResponse` (no choices -> ``error``).

    The SDK builds its models without validating them: a field of the wrong type reads
    as absent, and arguments that are not JSON text stay unreadable (the loop records
    ``invalid_tool_arguments``)."""
    choices = field(obj, "choices")
    usage = neutral_usage("chat", field(obj, "usage"))
    model = as_str(field(obj, "model"))
    if not isinstance(choices, SEQUENCES) or not choices:
        return ModelResponse(finish_reason="error", usage=usage, model=model, raw=obj)
    choice = choices[0]
    message = field(choice, "message")
    calls = tuple(_tool_call(tc) for tc in as_seq(field(message, "tool_calls")))
    finish = field(choice, "finish_reason", "stop")
    reason = _FINISH.get(finish, "stop") if isinstance(finish, str) else "stop"
    if calls and reason == "stop":
        reason = "tool_calls"
    return ModelResponse(
        text=as_text(field(message, "content")),
        tool_calls=calls,
        finish_reason=reason,
        usage=usage,
        model=model,
        raw=obj,
    )


def _tool_call(tc: Any) -> ToolCallRequest:
    fn = field(tc, "function")
    args = field(fn, "arguments", "")
    return ToolCallRequest(
        id=as_text(field(tc, "id")),
        name=as_text(field(fn, "name")),
        arguments=args if isinstance(args, str) else dumps_bounded(args),
    )


class OpenAIChatModel:
    """A :class:`~budgetmix.adapters.base.ChatModel` (and ``AsyncChatModel``) over Chat
    Completions, for :func:`budgetmix.adapters.run_agent`.

    The loop charges turns and retries; this only translates. SDK errors propagate so
    the loop's retry policy can classify them (the SDK's own retries are off).
    ``tool_choice="none"`` keeps the tools in the request (prompt cache) for the grace turn.
    The messages (plain JSON, built here) go through ``extra_body`` without the SDK's
    per-message request transform, as with :func:`budgeted`: the same bytes, less client
    time.

    Args:
        client: an ``openai.OpenAI`` or ``openai.AsyncOpenAI`` (not a budgeted wrapper).
        model: the model name.
        provider_name: ``gen_ai.provider.name`` (``openai``; say ``vllm`` etc. for others).
        request_options: extra ``create`` arguments (``temperature``, ``max_tokens``...).
        sdk_transform: hand the SDK the messages to transform, for code that patches its
            ``create`` and reads them (see :func:`budgeted`).
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
        body = self._sent(body)
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
        body = self._sent(body)
        return chat_response(await self._client.chat.completions.create(**body))

    def _sent(self, body: dict[str, Any]) -> dict[str, Any]:
        """``body`` as handed to the SDK: plain-JSON messages ride in ``extra_body``."""
        messages = body["messages"]
        if not self.sdk_transform and plain_json(messages):
            send_as_is(body, "messages", sdk_sees=[])
        return body
