"""Budgets at the HTTP layer: an httpx transport for any framework built on the SDKs.

::

    transport = AsyncBudgetTransport(None, controller)
    client = openai.AsyncOpenAI(http_client=httpx.AsyncClient(transport=transport), max_retries=0)
    # hand `client` to the OpenAI Agents SDK, Pydantic AI, ... - their code is unchanged

For ``POST .../chat/completions``, ``.../responses`` (OpenAI and compatible
servers: vLLM, Ollama, ...) and ``.../v1/messages`` (Anthropic) the transport
charges a turn before forwarding, injects the budget notice into the JSON body,
retries transient failures (429, 5xx, timeouts, resets) under the controller's
retry policy without consuming turns, and reads usage, cost and tool-call
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
message instead, which frameworks treat as the end of the run.

Which episode is charged: an :class:`~budgetmix.Episode` target always; with a
:class:`~budgetmix.BudgetController` target, its current episode if the request
is made inside one, else an episode the transport opens per conversation
(named by the ``x-budgetmix-conversation`` header, else by the conversation's
opening messages) and closes with :meth:`BudgetTransport.finish`.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import sys
import threading
from collections.abc import Awaitable, Callable
from types import ModuleType
from typing import Any, Literal

import httpx
from budgetmix.adapters._endpoints import Target, resolve_episode
from budgetmix.adapters._replies import HTTPStatusFailure, refused, sdk_safe
from budgetmix.adapters._sse import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_EVENT_BYTES,
    BodyLimitTap,
    EventStreamDecoder,
    SSETap,
    check_limit,
    limit_error,
    read_json,
    tap_streams,
)
from budgetmix.adapters._turn import TurnRequest, request_problem
from budgetmix.adapters._wire import WireKind, parse_response, terminal_body
from budgetmix.adapters._wire.common import field
from budgetmix.adapters.pricing import DEFAULT_PRICING, Pricing
from budgetmix.controller import BudgetController
from budgetmix.episode import Episode
from budgetmix.events import EpisodeResult
from budgetmix.exceptions import (
    BudgetExhausted,
    ConfigError,
    EarlyStopped,
    ProviderError,
)

__all__ = [
    "CONVERSATION_HEADER",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_EVENT_BYTES",
    "AsyncBudgetTransport",
    "BudgetTransport",
    "wire_kind",
]

# one encoder for every request: json.dumps builds one per call
_COMPACT_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
# for a body with a lone surrogate (sent escaped, as "\ud800"): escaped again, as it came
_ASCII_JSON = json.JSONEncoder(separators=(",", ":")).encode


#: Request header naming the conversation an owned episode belongs to.
CONVERSATION_HEADER = "x-budgetmix-conversation"
OnExhausted = Literal["raise", "respond"]


def wire_kind(method: str, path: str) -> WireKind | None:
    """Which budgeted endpoint a request hits, if any."""
    if method.upper() != "POST":
        return None
    path = path.rstrip("/")
    if path.endswith("/chat/completions"):
        return "chat"
    if path.endswith("/responses"):
        return "responses"
    if path.endswith("/messages") and "/threads/" not in path:
        return "anthropic"
    return None


def _lib(request: Any) -> ModuleType:
    # httpx and httpx2 share one API; answer in the library the request came from
    return sys.modules[type(request).__module__.split(".", 1)[0]]


def _conversation_key(kind: WireKind, body: dict[str, Any]) -> str:
    """A stable name for a conversation: its opening (system + first user) content."""
    if kind == "responses":
        raw = body.get("input")
        first = raw if isinstance(raw, str) else (raw or [None])[0]
        opening: Any = [body.get("instructions"), first]
    else:
        messages = list(body.get("messages") or [])
        head: list[Any] = []
        for m in messages:
            head.append(m)
            if field(m, "role") == "user":
                break
        opening = [body.get("system"), head]
    return hashlib.sha256(json.dumps(opening, sort_keys=True, default=str).encode()).hexdigest()[
        :16
    ]


def _read_body(raw: bytes) -> tuple[dict[str, Any], str | None]:
    """A model request's JSON body, and what makes it unusable (``None``: nothing)."""
    try:
        body = read_json(raw)
    except RecursionError:
        return {}, "its JSON nests too deep to read"
    except ValueError:
        return {}, "not JSON"
    if not isinstance(body, dict):
        return {}, f"expected a JSON object, got {type(body).__name__}"
    return body, request_problem(body)


class _Plan:
    """A budgeted request ready to forward."""

    __slots__ = ("kind", "lib", "outgoing", "req")

    def __init__(self, lib: ModuleType, kind: WireKind, req: TurnRequest, outgoing: Any) -> None:
        self.lib, self.kind, self.req, self.outgoing = lib, kind, req, outgoing


class _TransportCore:
    """What the sync and async transports share; no I/O."""

    def __init__(
        self,
        target: Target,
        *,
        pricing: Pricing | None,
        on_exhausted: OnExhausted,
        sleep: Any,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        if on_exhausted not in ("raise", "respond"):
            raise ValueError(f"on_exhausted must be 'raise' or 'respond', got {on_exhausted!r}")
        self.max_event = check_limit("max_event_bytes", max_event_bytes)
        self.max_body = check_limit("max_body_bytes", max_body_bytes)
        self.target = target
        self.pricing = pricing if pricing is not None else DEFAULT_PRICING
        self.on_exhausted: OnExhausted = on_exhausted
        self.sleep = sleep
        self._owned: dict[str, tuple[Episode, contextvars.Context]] = {}
        self._response_conversation: dict[str, str] = {}
        self._lock = threading.Lock()

    # -- episodes ----------------------------------------------------------------------
    def episode_for(self, request: Any, kind: WireKind, body: dict[str, Any]) -> Episode | None:
        ep = resolve_episode(self.target)
        if ep is not None or not isinstance(self.target, BudgetController):
            return ep
        key = request.headers.get(CONVERSATION_HEADER)
        if not key:
            prev = body.get("previous_response_id")
            key = self._response_conversation.get(prev) if isinstance(prev, str) else None
        key = key or _conversation_key(kind, body)
        with self._lock:
            found = self._owned.get(key)
            if found is None:
                ep = self.target.episode(metadata={"conversation": key}, conversation_id=key)
                # enter in a copy of the context: the caller's current episode stays as it was
                ctx = contextvars.copy_context()
                ctx.run(ep.__enter__)
                found = self._owned[key] = (ep, ctx)
        return found[0]

    @property
    def episodes(self) -> dict[str, Episode]:
        """Episodes this transport opened, by conversation."""
        return {k: ep for k, (ep, _) in self._owned.items()}

    def finish(
        self, conversation: str | None = None, *, success: bool = False
    ) -> list[EpisodeResult]:
        """Close owned episodes (one, or all) and return their results."""
        with self._lock:
            keys = [conversation] if conversation is not None else list(self._owned)
            closing = [self._owned.pop(k) for k in keys if k in self._owned]
        results: list[EpisodeResult] = []
        for ep, ctx in closing:
            if not ep.finished:
                ctx.run(ep.finish, success)
            ctx.run(ep.__exit__, None, None, None)
            if ep.result is not None:
                results.append(ep.result)
        return results

    # -- requests ----------------------------------------------------------------------
    def plan(self, request: Any, raw_body: bytes) -> _Plan | Any | None:
        """``None``: pass through; a response: answer without forwarding; else a plan.

        Raises:
            ConfigError: (as the SDKs' own error too) a model request that would be
                budgeted cannot be read or has the wrong shape; nothing was sent.
        """
        kind = wire_kind(request.method, request.url.path)
        if kind is None:
            return None
        body, problem = _read_body(raw_body)
        if problem is not None:
            if resolve_episode(self.target) is None and not isinstance(
                self.target, BudgetController
            ):
                return None  # nothing would be budgeted: it goes as it came
            raise refused(problem)  # passed on unread, it would skip the budget
        ep = self.episode_for(request, kind, body)
        if ep is None:
            return None
        lib = _lib(request)
        try:
            req = TurnRequest(ep, kind, body, self.pricing)
        except (BudgetExhausted, EarlyStopped) as exc:
            if self.on_exhausted == "respond":
                text = f"[budget: {exc}]"
                model = body.get("model")
                payload = terminal_body(kind, model if isinstance(model, str) else "", text)
                return lib.Response(200, json=payload, request=request)
            raise sdk_safe(exc) from exc
        except ConfigError as exc:
            raise sdk_safe(exc) from exc
        out = req.body
        try:
            content = _COMPACT_JSON(out).encode()
        except UnicodeEncodeError:  # a lone surrogate, which came escaped: escape it again
            content = _ASCII_JSON(out).encode()
        headers = lib.Headers(request.headers)  # a copy, with the new body's length
        headers["content-length"] = str(len(content))
        if req.stream:
            # we read the event stream as it passes: ask for it uncompressed
            headers["accept-encoding"] = "identity"
        outgoing = lib.Request(
            request.method,
            request.url,
            headers=headers,
            stream=lib.ByteStream(content),  # headers are final: skip httpx's re-encoding
            extensions=request.extensions,
        )
        return _Plan(lib, kind, req, outgoing)

    def check(self, response: Any) -> Any:
        """Raise error statuses into the retry loop (body already read)."""
        if response.status_code >= 400:
            raise HTTPStatusFailure(response)
        return response

    def failed(self, plan: _Plan, exc: ProviderError) -> Any:
        """After the retries: the provider's own error response, or its exception."""
        cause = exc.__cause__
        if isinstance(cause, HTTPStatusFailure):
            return cause.response  # already read; the client sees the provider's answer
        if cause is not None and cause is not exc:
            raise cause
        raise exc

    # -- responses ---------------------------------------------------------------------
    def limit_body(self, plan: _Plan, response: Any, *, record: bool, is_async: bool) -> None:
        """Count ``response``'s body against ``max_body_bytes`` as it is read; past the
        limit reading raises :class:`ResponseFormatError`, recorded on the turn when
        ``record`` (else inside the turn's call, which records it)."""
        sync_tap, async_tap = tap_streams(plan.lib)
        cls = async_tap if is_async else sync_tap
        tap = BodyLimitTap(plan.req if record else None, self.max_body, sdk_safe)
        response.stream = cls(response.stream, tap)

    def within_limit(self, plan: _Plan | None, content: bytes) -> bytes:
        """``content`` (a body read before the transport saw it is counted here); past the
        limit, raise (recorded on ``plan``'s turn when given)."""
        if len(content) <= self.max_body:
            return content
        exc = limit_error("the response body", "max_body_bytes", self.max_body)
        if plan is not None:
            plan.req.turn.failed(exc)
        raise sdk_safe(exc)

    def finish_json(self, plan: _Plan, response: Any, content: bytes) -> Any:
        try:
            data = read_json(self.within_limit(plan, content))
        except (ValueError, RecursionError):  # not JSON, or too deep to read: no output
            data = None
        if isinstance(data, dict):
            parsed = parse_response(plan.kind, data)
            rid = data.get("id")
            if plan.kind == "responses" and isinstance(rid, str):
                conv = plan.req.episode.metadata.get("conversation")
                if isinstance(conv, str):
                    self._response_conversation[rid] = conv
        else:
            parsed = parse_response(plan.kind, {})
        plan.req.finish(parsed)
        return response  # read already: the client takes its decoded content as is

    def is_sse(self, plan: _Plan, response: Any) -> bool:
        ctype = str(response.headers.get("content-type", ""))
        return plan.req.stream or ctype.startswith("text/event-stream")

    def tapped(self, plan: _Plan, response: Any, *, is_async: bool) -> Any:
        sync_tap, async_tap = tap_streams(plan.lib)
        cls = async_tap if is_async else sync_tap
        tap = SSETap(plan.req, EventStreamDecoder(self.max_event, self.max_body), sdk_safe)
        headers = [
            (k, v) for k, v in response.headers.multi_items() if k.lower() != "content-length"
        ]
        return plan.lib.Response(
            response.status_code,
            headers=headers,
            stream=cls(response.stream, tap),
            request=plan.outgoing,
            extensions=response.extensions,
        )


class BudgetTransport(httpx.BaseTransport):
    """Sync transport: ``httpx.Client(transport=BudgetTransport(None, controller))``.

    Args:
        inner: the transport that really sends (default: the library's ``HTTPTransport``).
        target: an :class:`Episode`, a :class:`BudgetController`, or ``None`` (the current
            episode only).
        pricing: prices for cost (default :data:`DEFAULT_PRICING`).
        on_exhausted: ``"raise"`` (an SDK-safe :class:`BudgetExhausted`) or ``"respond"``
            (a synthetic final assistant message).
        sleep: waits between retries (tests inject a recorder).
        max_event_bytes: the most one server-sent event may hold (default 16 MiB).
        max_body_bytes: the most one response body may hold, whole or streamed (default
            64 MiB). Past either, reading the response raises
            :class:`~budgetmix.ResponseFormatError` (a ``provider_error`` on the turn).

    Raises:
        ConfigError: a limit is not a positive int.
    """

    def __init__(
        self,
        inner: Any = None,
        target: Target = None,
        *,
        pricing: Pricing | None = None,
        on_exhausted: OnExhausted = "raise",
        sleep: Callable[[float], None] | None = None,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        self._inner = inner
        self._core = _TransportCore(
            target,
            pricing=pricing,
            on_exhausted=on_exhausted,
            sleep=sleep,
            max_event_bytes=max_event_bytes,
            max_body_bytes=max_body_bytes,
        )

    @property
    def episodes(self) -> dict[str, Episode]:
        """Episodes this transport opened, by conversation."""
        return self._core.episodes

    def finish(
        self, conversation: str | None = None, *, success: bool = False
    ) -> list[EpisodeResult]:
        """Close owned episodes (one, or all) and return their results."""
        return self._core.finish(conversation, success=success)

    def _transport(self, request: Any) -> Any:
        if self._inner is None:
            self._inner = _lib(request).HTTPTransport()
        return self._inner

    def handle_request(self, request: Any) -> Any:
        """Budget a model request, or pass any other request through."""
        inner = self._transport(request)
        plan = self._core.plan(request, request.read())
        if plan is None:
            return inner.handle_request(request)
        if not isinstance(plan, _Plan):
            return plan
        core = self._core

        def send() -> Any:
            response = inner.handle_request(plan.outgoing)
            if response.status_code >= 400:
                core.limit_body(plan, response, record=False, is_async=False)
                core.within_limit(None, response.read())
            return core.check(response)

        try:
            response = plan.req.turn.call(send, sleep=core.sleep)
        except ProviderError as exc:
            return core.failed(plan, exc)
        if core.is_sse(plan, response):
            return core.tapped(plan, response, is_async=False)
        core.limit_body(plan, response, record=True, is_async=False)
        try:
            content = response.read()
        except BaseException:
            response.close()
            raise
        return core.finish_json(plan, response, content)

    def close(self) -> None:
        if self._inner is not None:
            self._inner.close()


class AsyncBudgetTransport(httpx.AsyncBaseTransport):
    """Async twin of :class:`BudgetTransport`, for ``httpx.AsyncClient`` (and ``httpx2``)."""

    def __init__(
        self,
        inner: Any = None,
        target: Target = None,
        *,
        pricing: Pricing | None = None,
        on_exhausted: OnExhausted = "raise",
        sleep: Callable[[float], Awaitable[None]] | None = None,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        self._inner = inner
        self._core = _TransportCore(
            target,
            pricing=pricing,
            on_exhausted=on_exhausted,
            sleep=sleep,
            max_event_bytes=max_event_bytes,
            max_body_bytes=max_body_bytes,
        )

    @property
    def episodes(self) -> dict[str, Episode]:
        """Episodes this transport opened, by conversation."""
        return self._core.episodes

    def finish(
        self, conversation: str | None = None, *, success: bool = False
    ) -> list[EpisodeResult]:
        """Close owned episodes (one, or all) and return their results."""
        return self._core.finish(conversation, success=success)

    def _transport(self, request: Any) -> Any:
        if self._inner is None:
            self._inner = _lib(request).AsyncHTTPTransport()
        return self._inner

    async def handle_async_request(self, request: Any) -> Any:
        """Budget a model request, or pass any other request through."""
        inner = self._transport(request)
        plan = self._core.plan(request, await request.aread())
        if plan is None:
            return await inner.handle_async_request(request)
        if not isinstance(plan, _Plan):
            return plan
        core = self._core

        async def send() -> Any:
            response = await inner.handle_async_request(plan.outgoing)
            if response.status_code >= 400:
                core.limit_body(plan, response, record=False, is_async=True)
                core.within_limit(None, await response.aread())
            return core.check(response)

        try:
            response = await plan.req.turn.acall(send, sleep=core.sleep)
        except ProviderError as exc:
            return core.failed(plan, exc)
        if core.is_sse(plan, response):
            return core.tapped(plan, response, is_async=True)
        core.limit_body(plan, response, record=True, is_async=True)
        try:
            content = await response.aread()
        except BaseException:
            await response.aclose()
            raise
        return core.finish_json(plan, response, content)

    async def aclose(self) -> None:
        if self._inner is not None:
            await self._inner.aclose()
