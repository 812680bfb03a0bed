"""The gateway: a pure ASGI app that budgets the three model wires on their way upstream.

Each model request (``POST .../chat/completions``, ``.../responses``, ``.../messages``)
becomes one episode of the conversation it continues, stored under the tenant's keys
(:mod:`budgetmix.gateway.scopes`), with the tenant's window as its parent: the turn is
checked and charged over both in the store in one step. The request then goes through
:class:`~budgetmix.adapters.http.AsyncBudgetTransport`, the transport every budgeted
client uses: the same notice in the same placement, retries, usage, cost and tool-call
mistakes read from the response, spans; an event stream is passed on chunk by chunk as
it arrives. What a client sees at exhaustion, on a bad request or with the store down is
:mod:`budgetmix.gateway.replies`' (each wire's own format). Every other request is
forwarded as it came, unbudgeted.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import httpx
from budgetmix import BudgetController, BudgetExhausted, ConfigError, EarlyStopped, NotifyEveryTurn
from budgetmix._deps import require
from budgetmix.adapters._sse import EventStreamDecoder
from budgetmix.adapters._wire import WireKind
from budgetmix.adapters.http import AsyncBudgetTransport, wire_kind
from budgetmix.episode import Episode
from budgetmix.exceptions import ProviderError
from budgetmix.gateway.admin import Admin
from budgetmix.gateway.config import GatewayConfig
from budgetmix.gateway.replies import Send, error_reply, exhausted_reply, send_start
from budgetmix.gateway.scopes import (
    RESPONSE_TTL,
    BadRequest,
    conversation_key,
    conversation_of,
    response_link,
    tenant_key,
    tenant_of,
)
from budgetmix.stores import LedgerStore, StoreError, idempotency_key, open_store
from opentelemetry import trace

__all__ = ["Gateway", "upstream_transport"]

log = logging.getLogger("budgetmix.gateway")

Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
_HOP = frozenset(
    {b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"te",
     b"trailer", b"transfer-encoding", b"upgrade", b"host", b"content-length"}
)  # fmt: skip
_OURS = frozenset({b"x-budgetmix-conversation", b"x-budgetmix-request-id"})


class _Disconnected(Exception):
    """The client went away before its request was read."""


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    """The request body, or ``None`` when it is over ``limit`` bytes."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Disconnected
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


class _ResponseId:
    """Finds a Responses response's id in its event stream (the first event), once."""

    def __init__(self) -> None:
        self.found: str | None = None
        self._decoder: EventStreamDecoder | None = EventStreamDecoder(2**20, 2**20)

    def feed(self, chunk: bytes) -> None:
        if self._decoder is None:
            return
        try:
            for data in self._decoder.feed(chunk):
                event = json.loads(data)
                response = event.get("response") if isinstance(event, dict) else None
                if isinstance(response, dict) and isinstance(response.get("id"), str):
                    self.found = response["id"]
                    break
            else:
                return
        except (ValueError, ProviderError):
            pass
        self._decoder = None  # found, or unreadable: stop looking


def upstream_transport(limits: httpx.Limits) -> httpx.AsyncBaseTransport:
    """The gateway's connection pool to its upstreams: aiohttp's client under httpx's
    transport interface (``httpx-aiohttp``). Per upstream call it spends about half the
    CPU of httpx's own (httpcore's) pool, the largest part of what the gateway adds
    (docs/gateway.md, *Measured*); requests, errors (as ``httpx`` exceptions) and
    streamed bodies stay httpx's.

    Raises:
        MissingExtraError: ``httpx-aiohttp`` is not installed (``budgetmix[gateway]``).
    """
    module = require("httpx-aiohttp", "gateway", module="httpx_aiohttp")
    return _Refusals(module.AiohttpTransport(limits=limits))


class _Refusals(httpx.AsyncBaseTransport):
    """httpx-aiohttp maps a refused connection to ``httpx.ConnectTimeout`` (its first
    match for aiohttp's connector error); it is a ``httpx.ConnectError``, as httpx's own
    pool says."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            return await self.inner.handle_async_request(request)
        except httpx.ConnectTimeout as exc:
            cause = exc.__cause__
            if cause is None or isinstance(cause, TimeoutError):
                raise
            raise httpx.ConnectError(f"{type(cause).__name__}: {cause}", request=request) from cause

    async def aclose(self) -> None:
        await self.inner.aclose()


class Gateway:
    """The ASGI app (``uvicorn.run(Gateway(config))``).

    Args:
        config: what to budget and where to forward.
        store: the ledgers (default: ``open_store(config.store)``).
        upstream: the httpx transport that reaches the upstream (default: aiohttp's
            client behind httpx's transport interface, :func:`upstream_transport`;
            tests pass one).
        tracer_provider: spans go there (default: the global provider).
    """

    def __init__(
        self,
        config: GatewayConfig,
        *,
        store: LedgerStore | None = None,
        upstream: httpx.AsyncBaseTransport | None = None,
        tracer_provider: trace.TracerProvider | None = None,
    ) -> None:
        self.config = config
        self.store = store if store is not None else open_store(config.store)
        self.controller = BudgetController(
            config.conversation,
            name="budgetmix-gateway",
            notice=NotifyEveryTurn(format=config.notice_format),
            tracer_provider=tracer_provider,
        )
        timeout = httpx.Timeout(config.timeout_seconds, connect=10.0)
        limits = httpx.Limits(max_connections=2000, max_keepalive_connections=500)
        inner = upstream if upstream is not None else upstream_transport(limits)
        # requests go to the transports themselves: an httpx client's own layers (auth,
        # redirects, cookies) would only add to every call, and a proxy needs none of them
        self._timeout = timeout.as_dict()
        self.budgeted = AsyncBudgetTransport(inner, None, on_exhausted="raise")
        # unbudgeted requests (other paths; the store down under fail_open) skip the
        # budget transport, which would attribute them to some other open episode
        self.plain = inner
        self.admin = Admin(config, self.store)

    # -- ASGI --------------------------------------------------------------------------
    async def __call__(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        """The ASGI entry point (``http`` and ``lifespan``)."""
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            with contextlib.suppress(_Disconnected):
                await self._http(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def aclose(self) -> None:
        """Close the upstream connections and the store."""
        await self.budgeted.aclose()
        self.store.close()

    async def _http(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        cfg = self.config
        path, method = scope["path"], scope["method"]
        raw: list[tuple[bytes, bytes]] = list(scope["headers"])
        kind = wire_kind(method, path)
        if sum(len(k) + len(v) for k, v in raw) > cfg.max_header_bytes:
            await error_reply(send, kind, 431, "request headers are over max_header_bytes; "
                              "nothing was charged", "headers_too_large")  # fmt: skip
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in raw}
        body = await _read_body(receive, cfg.max_body_bytes)
        if body is None:
            await error_reply(send, kind, 413, "request body is over max_body_bytes; nothing "
                              "was charged", "body_too_large")  # fmt: skip
            return
        if path.startswith("/budgetmix/"):
            await self.admin.handle(method, path, headers, body, send)
            return
        request = self._request(scope, kind, raw, body)
        if kind is None:
            await self._forward(request, send, kind)
        else:
            await self._budgeted(kind, headers, body, request, send)

    def _request(
        self,
        scope: MutableMapping[str, Any],
        kind: WireKind | None,
        raw: list[tuple[bytes, bytes]],
        body: bytes,
    ) -> httpx.Request:
        cfg = self.config
        base = cfg.messages_upstream if kind == "anthropic" else cfg.upstream
        url = base.rstrip("/") + scope["path"]
        if scope.get("query_string"):
            url += "?" + scope["query_string"].decode("latin-1")
        keep = [(k, v) for k, v in raw if k.lower() not in _HOP and k.lower() not in _OURS]
        if kind is not None:  # the conversation header is budgetmix's: the transport drops it
            keep += [(k, v) for k, v in raw if k.lower() == b"x-budgetmix-conversation"]
        return httpx.Request(scope["method"], url, headers=keep, content=body,
                             extensions={"timeout": self._timeout})  # fmt: skip

    # -- a budgeted request ------------------------------------------------------------
    def episode(self, tenant: str, conversation: str) -> Episode:
        """The episode of one request: the conversation's ledger under the tenant's window.

        Raises:
            StoreError: the store could not be reached (nothing was charged).
        """
        cfg = self.config
        parent = None
        if cfg.tenant is not None:
            parent = self.controller.episode(
                name="tenant",
                episode_id=tenant_key(tenant, cfg.tenant_window_seconds),
                budget=cfg.tenant,
                store=self.store,
            )
        return self.controller.episode(
            episode_id=conversation_key(tenant, conversation),
            budget=cfg.conversation,
            parent=parent,
            store=self.store,
            conversation_id=conversation,
        )

    async def _budgeted(
        self, kind: WireKind, headers: dict[str, str], body: bytes, request: httpx.Request,
        send: Send,
    ) -> None:  # fmt: skip
        try:
            data = json.loads(body)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            await error_reply(send, kind, 400, "request body: expected a JSON object; nothing "
                              "was charged", "invalid_body")  # fmt: skip
            return
        try:
            tenant = tenant_of(headers, self.config.tenant_header)
            conversation = conversation_of(headers, data, tenant, self.store)
            if conversation is None:
                if self.config.unattributed == "refuse":
                    raise BadRequest("name the conversation: send the x-budgetmix-conversation "
                                     "header (or a Responses previous_response_id)")  # fmt: skip
                conversation = "default"
            episode = self.episode(tenant, conversation)
        except BadRequest as exc:
            await error_reply(send, kind, 400, f"{exc}; nothing was charged", "invalid_request")
            return
        except StoreError as exc:
            await self._store_down(exc, request, send, kind)
            return
        request_id = headers.get("idempotency-key") or headers.get("x-budgetmix-request-id")
        keyed = (
            idempotency_key(f"{tenant}:{request_id}") if request_id else contextlib.nullcontext()
        )
        with episode, keyed:
            try:
                response = await self.budgeted.handle_async_request(request)
            except (BudgetExhausted, EarlyStopped) as exc:
                respond = self.config.on_exhausted == "respond"
                await exhausted_reply(send, kind, data, f"[budget: {exc}]", respond=respond)
                return
            except StoreError as exc:
                failed: StoreError | None = exc
            except ConfigError as exc:
                await error_reply(send, kind, 400, str(exc), "invalid_request")
                return
            except (ProviderError, httpx.HTTPError) as exc:
                await error_reply(send, kind, 502, f"upstream: {exc}", "upstream_error")
                return
            else:
                failed = None
                found = await self._relay(response, send, kind)
                if response.status_code < 400:
                    episode.finish(success=True)
                if found is not None:
                    self._link(tenant, found, conversation)
        if failed is not None:  # out of the episode: fail_open forwards it unbudgeted
            await self._store_down(failed, request, send, kind)

    async def _store_down(
        self, exc: StoreError, request: httpx.Request, send: Send, kind: WireKind
    ) -> None:
        if self.config.fail_open:
            log.warning("budgetmix gateway: %s; forwarding unbudgeted (fail_open)", exc)
            await self._forward(request, send, kind)
            return
        log.error("budgetmix gateway: %s; refused (fail closed)", exc)
        await error_reply(send, kind, 503, "the budget store is unavailable; nothing was sent "
                          "upstream (retry later)", "budget_store_unavailable")  # fmt: skip

    def _link(self, tenant: str, response_id: str, conversation: str) -> None:
        try:
            self.store.link(response_link(tenant, response_id), conversation, RESPONSE_TTL)
        except StoreError as exc:  # the answer is delivered; only the chain is lost
            log.error("budgetmix gateway: %s; response %s not linked", exc, response_id)

    # -- passing bytes on --------------------------------------------------------------
    async def _forward(self, request: httpx.Request, send: Send, kind: WireKind | None) -> None:
        try:
            response = await self.plain.handle_async_request(request)
        except httpx.HTTPError as exc:
            await error_reply(send, kind, 502, f"upstream: {exc}", "upstream_error")
            return
        await self._relay(response, send, None)

    async def _relay(
        self, response: httpx.Response, send: Send, kind: WireKind | None
    ) -> str | None:
        """Send ``response`` on: whole when the transport read it, else chunk by chunk as it
        arrives. A Responses response's id, if found."""
        headers = [(k, v) for k, v in response.headers.raw if k.lower() not in _HOP]
        if response.is_stream_consumed:  # read (and decoded) by the transport
            content = response.content
            headers = [(k, v) for k, v in headers if k.lower() != b"content-encoding"]
            await send_bytes_raw(send, response.status_code, headers, content)
            if kind == "responses" and response.status_code < 400:
                with contextlib.suppress(ValueError, AttributeError):
                    found = json.loads(content).get("id")
                    return found if isinstance(found, str) else None
            return None
        watch = _ResponseId() if kind == "responses" else None
        await send_start(send, response.status_code, headers)
        try:
            async for chunk in response.aiter_raw():
                if watch is not None:
                    watch.feed(chunk)
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await response.aclose()
        return watch.found if watch is not None else None


async def send_bytes_raw(
    send: Send, status: int, headers: list[tuple[bytes, bytes]], content: bytes
) -> None:
    """A whole response with its own headers and a fresh ``content-length``."""
    headers = [*headers, (b"content-length", str(len(content)).encode())]
    await send_start(send, status, headers)
    await send({"type": "http.response.body", "body": content, "more_body": False})
