"""Budgets at the HTTP layer: an httpx transport for any framework built on the SDKs.

::

    transport = AsyncBudgetTransport(None, controller)
    client = openai.AsyncOpenAI(http_client=httpx.AsyncClient(transport=transport), max_retries=0)
    # hand `client` to the OpenAI Agents SDK, Pydantic AI, ... - their code is unchanged

For ``POST .../chat/completions``, ``.../responses`` (OpenAI and compatible
servers: vLLM, Ollama, ...) and ``.../v1/messages`` (Anthropic) the transport
charges a turn before forwarding, injects the budget notice into the JSON body,
retries transient failures (429, 5xx, timeouts, resets, a body cut short) under the
controller's retry policy without consuming turns (a whole body is read inside the
retried call, as the SDK wrappers' ``create`` reads it: the one classification, the
same retries; a body that is not JSON is a :class:`~budgetmix.ResponseFormatError` on
both paths; after them the SDK does not retry again, since each of its retries would be
a request charged a turn: a final error status carries ``x-should-retry: false``, which
the OpenAI and Anthropic SDKs obey, and a final transport error is raised as
:class:`~budgetmix.ProviderError`, which they raise as is), and reads usage, cost and tool-call
mistakes from the JSON or server-sent-event response (the event stream is read in
time linear in its size; one event over ``max_event_bytes`` or a body over
``max_body_bytes`` is a :class:`~budgetmix.ResponseFormatError`). A request to
those endpoints that would be budgeted but cannot be read (not JSON, nested too
deep) or has the wrong shape is refused with :class:`~budgetmix.ConfigError`
rather than sent without a budget. Every other request passes through untouched.
Works with ``httpx`` and ``httpx2`` clients alike (responses are built with the
request's own library).

A refused turn never reaches the network. By default it raises
:class:`~budgetmix.BudgetExhausted` (or :class:`~budgetmix.EarlyStopped`) as a
subclass that is also the SDK's base error, so the OpenAI and Anthropic clients
propagate it as is instead of wrapping it in a connection error and retrying.
With ``on_exhausted="respond"`` it answers with a synthetic final assistant
message instead, which frameworks treat as the end of the run: a JSON body, or for a
``"stream": true`` request the wire's event stream (Chat Completions chunks, Responses
events, Anthropic message events), which the SDKs' stream readers take.

Which episode is charged (the whole rule: :mod:`budgetmix.adapters._attribution`): an
:class:`~budgetmix.Episode` target always; else the episode the request is made in
(bind one at the framework's entry point: ``with controller.episode(): agent.run(...)``;
asyncio tasks inherit it, threads need ``contextvars.copy_context().run``); else the one
named by the ``x-budgetmix-conversation`` header (an open episode's id, or a conversation
the transport opens; the header is not forwarded), the episode of the Responses
``previous_response_id``, or the only open episode the transport has seen; several
open: refused. With a :class:`~budgetmix.BudgetController` target a request nothing
attributes charges the transport's own conversation ``"default"`` (a warning says so;
``unattributed="refuse"`` refuses it), closed with :meth:`BudgetTransport.finish`.
Never a fresh budget per request: the history is not used to tell runs apart.

Client libraries: the OpenAI SDK (3.57 tested) takes an ``httpx`` client; the Anthropic
SDK 2.14 (tested) takes only an ``httpx2`` one (``httpx.Client`` raises ``TypeError``
there; releases built on ``httpx`` take that). Both transports are instances of both
libraries' base transports, so the same object serves either::

    anthropic.Anthropic(http_client=httpx2.Client(transport=BudgetTransport(None, controller)))
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import httpx
from budgetmix import bypass
from budgetmix.adapters._attribution import DEFAULT_CONVERSATION, Unattributed
from budgetmix.adapters._deadlines import DEFAULT_READ_IDLE_SECONDS, DEFAULT_READ_TOTAL_SECONDS
from budgetmix.adapters._endpoints import Target
from budgetmix.adapters._live import LiveHandle
from budgetmix.adapters._replies import sdk_safe
from budgetmix.adapters._sse import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_EVENT_BYTES
from budgetmix.adapters._transport import (
    CONVERSATION_HEADER,
    OnExhausted,
    Plan,
    TransportCore,
    lib_of,
    wire_kind,
)
from budgetmix.adapters.pricing import Pricing
from budgetmix.episode import Episode
from budgetmix.events import EpisodeResult
from budgetmix.exceptions import ConfigError, ProviderError

if TYPE_CHECKING:
    import httpx2

    _Httpx2Base = httpx2.BaseTransport
    _Httpx2AsyncBase = httpx2.AsyncBaseTransport
else:
    try:  # the Anthropic SDK's client library; optional for budgetmix
        from httpx2 import AsyncBaseTransport as _Httpx2AsyncBase
        from httpx2 import BaseTransport as _Httpx2Base
    except ImportError:  # pragma: no cover - exercised only without httpx2

        class _Httpx2Base:
            pass

        class _Httpx2AsyncBase:
            pass


__all__ = [
    "CONVERSATION_HEADER",
    "DEFAULT_CONVERSATION",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_EVENT_BYTES",
    "AsyncBudgetTransport",
    "BudgetTransport",
    "wire_kind",
]


SleepT = TypeVar("SleepT")


class _Transport(LiveHandle, Generic[SleepT]):
    """What the sync and async transports share: their core and the episodes it owns.
    A copy or a pickle of a transport is the transport itself (frameworks deep-copy the
    settings they are given: :mod:`budgetmix.adapters._live`)."""

    def __init__(
        self,
        inner: Any = None,
        target: Target = None,
        *,
        pricing: Pricing | None = None,
        on_exhausted: OnExhausted = "raise",
        sleep: SleepT | None = None,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        unattributed: Unattributed = "share",
        read_idle_seconds: float = DEFAULT_READ_IDLE_SECONDS,
        read_total_seconds: float = DEFAULT_READ_TOTAL_SECONDS,
    ) -> None:
        self._inner = inner
        self._default_inner: dict[str, Any] = {}  # by library: httpx, httpx2
        self._core = TransportCore(
            target,
            pricing=pricing,
            on_exhausted=on_exhausted,
            sleep=sleep,
            max_event_bytes=max_event_bytes,
            max_body_bytes=max_body_bytes,
            unattributed=unattributed,
            read_idle_seconds=read_idle_seconds,
            read_total_seconds=read_total_seconds,
        )
        controller = target.controller if isinstance(target, Episode) else target
        if controller is not None:  # an episode that charges nothing then warns
            bypass.wired(controller, type(self).__name__)

    def _inner_for(self, request: Any, name: str) -> Any:
        """The transport that really sends: ``inner``, or the request library's own."""
        if self._inner is not None:
            return self._inner
        lib = lib_of(request)
        inner = self._default_inner.get(lib.__name__)
        if inner is None:
            inner = self._default_inner[lib.__name__] = getattr(lib, name)()
        return inner

    def _opened(self) -> list[Any]:
        return [self._inner] if self._inner is not None else list(self._default_inner.values())

    @property
    def episodes(self) -> dict[str, Episode]:
        """Episodes this transport opened, by conversation."""
        return self._core.episodes

    def finish(
        self, conversation: str | None = None, *, success: bool = False
    ) -> list[EpisodeResult]:
        """Close owned episodes (one, or all) and return their results; the next request
        that needs one opens a new one."""
        return self._core.finish(conversation, success=success)


SyncSleep = Callable[[float], None]
AsyncSleep = Callable[[float], Awaitable[None]]


class BudgetTransport(_Transport[SyncSleep], httpx.BaseTransport, _Httpx2Base):
    """Sync transport for ``httpx.Client`` and ``httpx2.Client`` alike (an instance of
    both libraries' ``BaseTransport``): ``httpx2.Client(transport=BudgetTransport(None,
    controller))`` for the Anthropic SDK 2.x, ``httpx.Client(...)`` for the OpenAI SDK.

    Args:
        inner: the transport that really sends (default: the request library's
            ``HTTPTransport``; ``AsyncHTTPTransport`` for :class:`AsyncBudgetTransport`).
        target: an :class:`Episode`, a :class:`BudgetController`, or ``None`` (the current
            episode only); which episode a request charges is the module's rule.
        pricing: prices for cost (default :data:`DEFAULT_PRICING`).
        on_exhausted: ``"raise"`` (an SDK-safe :class:`BudgetExhausted`) or ``"respond"``
            (a synthetic final assistant message, streamed when the request streams).
        sleep: waits between retries (tests inject a recorder).
        max_event_bytes: the most one server-sent event may hold (default 16 MiB).
        max_body_bytes: the most one response body may hold, whole or streamed (default
            64 MiB). Past either, reading the response raises
            :class:`~budgetmix.ResponseFormatError` (a ``provider_error`` on the turn).
        unattributed: with a controller target, what a request that no rule attributes
            to an episode does: ``"share"`` the transport's own conversation
            (:data:`DEFAULT_CONVERSATION`, with a warning) or ``"refuse"`` (a
            :class:`~budgetmix.ConfigError`, nothing sent).
        read_idle_seconds: the most seconds between two chunks of a response body
            (default 60), however the client's own read timeout is set.
        read_total_seconds: the most seconds to read one response body, whole or
            streamed (default 600). A body is also cut off when the episode's wall budget
            runs out: that raises :class:`~budgetmix.BudgetExhausted` on
            ``wall_seconds``, the two deadlines a non-retryable
            :class:`~budgetmix.ProviderError` naming the deadline; either within about
            a second of the bound, trickling server or not.

    Raises:
        ConfigError: a limit is not a positive int (a read deadline: not a positive
            number of at most a day), or ``on_exhausted`` / ``unattributed`` is not one
            of its values.
    """

    def handle_request(self, request: Any) -> Any:
        """Budget a model request, or pass any other request through."""
        core = self._core
        inner = self._inner_for(request, "HTTPTransport")
        plan = core.plan(request, request.read())
        if not isinstance(plan, Plan):
            return inner.handle_request(request) if plan is None else plan

        def send() -> Any:
            response = inner.handle_request(plan.outgoing)
            if core.streams(plan, response):
                return response
            try:  # read here, inside the retried call, as the SDK wrappers' create does
                content = core.limit_body(plan, response, is_async=False).read()
            except BaseException:
                response.close()
                raise
            return core.received(plan, response, content)

        try:
            response = plan.req.turn.call(send, sleep=core.sleep)
        except ProviderError as exc:
            return core.failed(plan, exc)
        if core.streams(plan, response):
            return core.tapped(plan, response, is_async=False)
        return core.finish_json(plan, response)

    async def handle_async_request(self, request: Any) -> Any:
        """Refused: a sync transport in an async client would block its event loop (and
        a framework that finds no async client builds its own, unbudgeted).

        Raises:
            ConfigError: always; nothing was sent.
        """
        raise sdk_safe(
            ConfigError(
                "BudgetTransport is sync and was handed to an async client: use "
                "AsyncBudgetTransport for httpx.AsyncClient / httpx2.AsyncClient (nothing "
                "was sent)"
            )
        )

    def close(self) -> None:
        """Close the wrapped transport(s)."""
        for inner in self._opened():
            inner.close()


class AsyncBudgetTransport(_Transport[AsyncSleep], httpx.AsyncBaseTransport, _Httpx2AsyncBase):
    """Async twin of :class:`BudgetTransport`, for ``httpx.AsyncClient`` and
    ``httpx2.AsyncClient``; the same arguments, with an async ``sleep``."""

    async def handle_async_request(self, request: Any) -> Any:
        """Budget a model request, or pass any other request through."""
        core = self._core
        inner = self._inner_for(request, "AsyncHTTPTransport")
        plan = core.plan(request, await request.aread())
        if not isinstance(plan, Plan):
            return await inner.handle_async_request(request) if plan is None else plan

        async def send() -> Any:
            response = await inner.handle_async_request(plan.outgoing)
            if core.streams(plan, response):
                return response
            try:
                content = await core.limit_body(plan, response, is_async=True).aread()
            except BaseException:
                await response.aclose()
                raise
            return core.received(plan, response, content)

        try:
            response = await plan.req.turn.acall(send, sleep=core.sleep)
        except ProviderError as exc:
            return core.failed(plan, exc)
        if core.streams(plan, response):
            return core.tapped(plan, response, is_async=True)
        return core.finish_json(plan, response)

    async def aclose(self) -> None:
        """Close the wrapped transport(s)."""
        for inner in self._opened():
            await inner.aclose()
