"""The HTTP transport's core, shared by its sync and async drivers; no I/O.

:class:`TransportCore` decides what a request is (a budgeted model call, or anything
else, passed through), which episode it charges (the target's, or one the transport
opens per conversation), builds the body to forward (notice injected), and reads what
comes back: error statuses into the retry loop, a JSON body into the turn, an event
stream through the recorder (:mod:`budgetmix.adapters._streams`) as the client reads it.
:mod:`budgetmix.adapters.http` holds the transports that do the I/O.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import sys
import threading
from types import ModuleType
from typing import Any, Literal

from budgetmix._validate import check_int
from budgetmix.adapters._endpoints import Target, resolve_episode
from budgetmix.adapters._replies import HTTPStatusFailure, refused, sdk_safe
from budgetmix.adapters._sse import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_EVENT_BYTES,
    EventStreamDecoder,
    limit_error,
    read_json,
)
from budgetmix.adapters._streams import BodyLimitTap, EventStreamTap, tap_streams
from budgetmix.adapters._turn import TurnRequest, request_problem
from budgetmix.adapters._wire import WireKind, parse_response, terminal_body
from budgetmix.adapters._wire.common import field
from budgetmix.adapters.pricing import DEFAULT_PRICING, Pricing
from budgetmix.controller import BudgetController
from budgetmix.episode import Episode
from budgetmix.events import EpisodeResult
from budgetmix.exceptions import BudgetExhausted, ConfigError, EarlyStopped, ProviderError

__all__ = ["CONVERSATION_HEADER", "OnExhausted", "Plan", "TransportCore", "lib_of", "wire_kind"]

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


def _sdk_safe(exc: BaseException, mapped: BaseException | None) -> BaseException:
    # the SDK maps the transport's exception itself; only budgetmix's own must survive it
    return sdk_safe(exc)


def lib_of(request: Any) -> ModuleType:
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


class Plan:
    """A budgeted request ready to forward."""

    __slots__ = ("kind", "lib", "outgoing", "req")

    def __init__(self, lib: ModuleType, kind: WireKind, req: TurnRequest, outgoing: Any) -> None:
        self.lib, self.kind, self.req, self.outgoing = lib, kind, req, outgoing


class TransportCore:
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
            raise ConfigError(f"on_exhausted: must be 'raise' or 'respond', got {on_exhausted!r}")
        self.max_event = check_int("max_event_bytes", max_event_bytes, minimum=1)
        self.max_body = check_int("max_body_bytes", max_body_bytes, minimum=1)
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
    def plan(self, request: Any, raw_body: bytes) -> Plan | Any | None:
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
        lib = lib_of(request)
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
        return Plan(lib, kind, req, outgoing)

    def check(self, response: Any) -> Any:
        """Raise error statuses into the retry loop (body already read)."""
        if response.status_code >= 400:
            raise HTTPStatusFailure(response)
        return response

    def failed(self, plan: Plan, exc: ProviderError) -> Any:
        """After the retries: the provider's own error response, or its exception."""
        cause = exc.__cause__
        if isinstance(cause, HTTPStatusFailure):
            return cause.response  # already read; the client sees the provider's answer
        if cause is not None and cause is not exc:
            raise cause
        raise exc

    # -- responses ---------------------------------------------------------------------
    def limit_body(self, plan: Plan, response: Any, *, is_async: bool, record: bool = False) -> Any:
        """Count ``response``'s body against ``max_body_bytes`` as it is read; past the
        limit reading raises :class:`ResponseFormatError`, recorded on the turn when
        ``record`` (else inside the turn's call, which records it); ``response`` itself."""
        sync_tap, async_tap = tap_streams(plan.lib)
        cls = async_tap if is_async else sync_tap
        tap = BodyLimitTap(plan.req if record else None, self.max_body, _sdk_safe)
        response.stream = cls(response.stream, tap)
        return response

    def within_limit(self, plan: Plan | None, content: bytes) -> bytes:
        """``content`` (a body read before the transport saw it is counted here); past the
        limit, raise (recorded on ``plan``'s turn when given)."""
        if len(content) <= self.max_body:
            return content
        exc = limit_error("the response body", "max_body_bytes", self.max_body)
        if plan is not None:
            plan.req.turn.failed(exc)
        raise sdk_safe(exc)

    def finish_json(self, plan: Plan, response: Any, content: bytes) -> Any:
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

    def is_sse(self, plan: Plan, response: Any) -> bool:
        ctype = str(response.headers.get("content-type", ""))
        return plan.req.stream or ctype.startswith("text/event-stream")

    def tapped(self, plan: Plan, response: Any, *, is_async: bool) -> Any:
        sync_tap, async_tap = tap_streams(plan.lib)
        cls = async_tap if is_async else sync_tap
        decoder = EventStreamDecoder(self.max_event, self.max_body)
        tap = EventStreamTap(plan.req, decoder, _sdk_safe)
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
