"""The HTTP transport's core, shared by its sync and async drivers; no I/O.

:class:`TransportCore` decides what a request is (a budgeted model call, or anything
else, passed through), which episode it charges (:mod:`budgetmix.adapters._attribution`
holds the rule), builds the body to forward (notice injected), and reads what comes
back. A whole body is read and decoded inside the retried call, as the SDK wrappers'
``create`` does, so one classification (:func:`~budgetmix.provider_errors.classify_exception`)
decides on both paths: a body cut short is retried, one that is not JSON becomes a
:class:`~budgetmix.ResponseFormatError`; an event stream is read through the recorder
(:mod:`budgetmix.adapters._streams`) as the client reads it.
:mod:`budgetmix.adapters.http` holds the transports that do the I/O.
"""

from __future__ import annotations

import json
import sys
from functools import partial
from types import ModuleType
from typing import Any, Literal

from budgetmix._validate import check_int, check_number
from budgetmix.adapters._attribution import CONVERSATION_HEADER, Attribution, Unattributed
from budgetmix.adapters._deadlines import (
    DEFAULT_READ_IDLE_SECONDS,
    DEFAULT_READ_TOTAL_SECONDS,
    ReadDeadline,
    socket_of,
)
from budgetmix.adapters._endpoints import Target
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
from budgetmix.adapters._wire import (
    ParsedResponse,
    WireKind,
    parse_response,
    terminal_body,
    terminal_stream,
)
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

__all__ = ["CONVERSATION_HEADER", "OnExhausted", "Plan", "TransportCore", "lib_of", "wire_kind"]

# one encoder for every request: json.dumps builds one per call
_COMPACT_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
# for a body with a lone surrogate (sent escaped, as "\ud800"): escaped again, as it came
_ASCII_JSON = json.JSONEncoder(separators=(",", ":")).encode

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
    # a stream's failure recorded on its turn is raised as what it was recorded as (a
    # ProviderError: a cut connection mid-stream is no httpx error the SDK lets through);
    # budgetmix's own errors as the SDKs' error classes too, so they survive the SDK
    return sdk_safe(mapped if mapped is not None else exc)


def lib_of(request: Any) -> ModuleType:
    """``httpx`` or ``httpx2``: the library ``request`` came from (they share one API; the
    transport answers in the request's own)."""
    return sys.modules[type(request).__module__.split(".", 1)[0]]


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


def _encode(body: dict[str, Any]) -> bytes:
    try:
        return _COMPACT_JSON(body).encode()
    except UnicodeEncodeError:  # a lone surrogate, which came escaped: escape it again
        return _ASCII_JSON(body).encode()


class Plan:
    """A budgeted request ready to forward; ``data``: its whole response's JSON, once read."""

    __slots__ = ("data", "kind", "lib", "outgoing", "req")

    def __init__(self, lib: ModuleType, kind: WireKind, req: TurnRequest, outgoing: Any) -> None:
        self.lib, self.kind, self.req, self.outgoing = lib, kind, req, outgoing
        self.data: Any = None


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
        unattributed: Unattributed = "share",
        read_idle_seconds: float = DEFAULT_READ_IDLE_SECONDS,
        read_total_seconds: float = DEFAULT_READ_TOTAL_SECONDS,
    ) -> None:
        if on_exhausted not in ("raise", "respond"):
            raise ConfigError(f"on_exhausted: must be 'raise' or 'respond', got {on_exhausted!r}")
        self.max_event = check_int("max_event_bytes", max_event_bytes, minimum=1)
        self.max_body = check_int("max_body_bytes", max_body_bytes, minimum=1)
        self.read_idle = check_number(
            "read_idle_seconds", read_idle_seconds, positive=True, maximum=86_400
        )
        self.read_total = check_number(
            "read_total_seconds", read_total_seconds, positive=True, maximum=86_400
        )
        self.target = target
        self.attribution = Attribution(target, unattributed)
        self.pricing = pricing if pricing is not None else DEFAULT_PRICING
        self.on_exhausted: OnExhausted = on_exhausted
        self.sleep = sleep

    # -- episodes ----------------------------------------------------------------------
    @property
    def episodes(self) -> dict[str, Episode]:
        """Episodes this transport opened, by conversation."""
        return self.attribution.episodes

    def finish(
        self, conversation: str | None = None, *, success: bool = False
    ) -> list[EpisodeResult]:
        """Close owned episodes (one, or all) and return their results."""
        return self.attribution.finish(conversation, success)

    # -- requests ----------------------------------------------------------------------
    def plan(self, request: Any, raw_body: bytes) -> Plan | Any | None:
        """``None``: pass through; a response: answer without forwarding; else a plan.

        Raises:
            ConfigError: (as the SDKs' own error too) a model request that would be
                budgeted cannot be read, has the wrong shape, or cannot be attributed to
                an episode; nothing was sent.
        """
        kind = wire_kind(request.method, request.url.path)
        if kind is None:
            return None
        body, problem = _read_body(raw_body)
        if problem is not None:
            if self.attribution.bound() is None and not isinstance(self.target, BudgetController):
                return None  # nothing would be budgeted: it goes as it came
            raise refused(problem)  # passed on unread, it would skip the budget
        ep = self.attribution.episode_for(request.headers.get(CONVERSATION_HEADER), body)
        if ep is None:
            return None
        lib = lib_of(request)
        try:
            req = TurnRequest(ep, kind, body, self.pricing, url=request.url)
        except (BudgetExhausted, EarlyStopped) as exc:
            if self.on_exhausted == "respond":
                return self._respond(lib, request, kind, body, exc)
            raise sdk_safe(exc) from exc
        except ConfigError as exc:
            raise sdk_safe(exc) from exc
        content = _encode(req.body)
        headers = lib.Headers(request.headers)  # a copy, with the new body's length
        headers.pop(CONVERSATION_HEADER, None)  # budgetmix's own: not the provider's
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

    def _respond(
        self, lib: ModuleType, request: Any, kind: WireKind, body: dict[str, Any], exc: Exception
    ) -> Any:
        """``on_exhausted="respond"``: a final assistant message, in the form the request
        asked for (an event stream for ``"stream": true``)."""
        text = f"[budget: {exc}]"
        model = body.get("model")
        name = model if isinstance(model, str) else ""
        if body.get("stream") is True:
            headers = {"content-type": "text/event-stream"}
            content = terminal_stream(kind, name, text)
            return lib.Response(200, headers=headers, content=content, request=request)
        return lib.Response(200, json=terminal_body(kind, name, text), request=request)

    def streams(self, plan: Plan, response: Any) -> bool:
        """Whether ``response`` is an event stream the client reads (not read here)."""
        if response.status_code >= 400:
            return False
        ctype = str(response.headers.get("content-type", ""))
        return plan.req.stream or ctype.startswith("text/event-stream")

    def received(self, plan: Plan, response: Any, content: bytes) -> Any:
        """A whole body, read inside the retried call: an error status is raised for the
        retry policy to classify, a 2xx body decoded (``plan.data``).

        Raises:
            HTTPStatusFailure: an error status.
            ValueError, RecursionError: the body is not JSON (or nests too deep), which
                the retry policy, like the SDK wrappers', does not retry.
            ResponseFormatError: the body is over ``max_body_bytes``.
        """
        self.within_limit(content)
        if response.status_code >= 400:
            raise HTTPStatusFailure(response)
        plan.data = read_json(content) if content else None
        return response

    def failed(self, plan: Plan, exc: ProviderError) -> Any:
        """After the controller's retries, what the SDK gets: the provider's own error
        response, marked ``x-should-retry: false``, or the :class:`ProviderError` (a
        :class:`ResponseFormatError` for a body that could not be read), which the SDKs
        raise as is, as the wrappers raise it. Either way the SDK does not retry again:
        each of its retries would be a new request, charged a turn."""
        cause = exc.__cause__
        if isinstance(cause, HTTPStatusFailure):
            response = cause.response  # already read; the client sees the provider's answer
            response.headers["x-should-retry"] = "false"
            return response
        raise sdk_safe(exc) from cause

    # -- responses ---------------------------------------------------------------------
    def deadline(self, plan: Plan, response: Any) -> ReadDeadline:
        """When reading ``response``'s body must end (the episode's wall budget, the idle
        and total read deadlines); armed now."""
        return ReadDeadline(
            plan.req.episode,
            idle_seconds=self.read_idle,
            total_seconds=self.read_total,
            sock=socket_of(response),
        )

    def limit_body(self, plan: Plan, response: Any, *, is_async: bool) -> Any:
        """Count ``response``'s body against ``max_body_bytes`` as it is read, within the
        read deadline; past the limit reading raises :class:`ResponseFormatError`, past
        the deadline its error; ``response`` itself."""
        sync_tap, async_tap = tap_streams(plan.lib)
        cls = async_tap if is_async else sync_tap
        tap = BodyLimitTap(None, self.max_body, _sdk_safe, self.deadline(plan, response))
        response.stream = cls(response.stream, tap)
        return response

    def within_limit(self, content: bytes) -> bytes:
        """``content`` (a body read before the transport saw it is counted here).

        Raises:
            ResponseFormatError: it is over ``max_body_bytes``.
        """
        if len(content) <= self.max_body:
            return content
        raise sdk_safe(limit_error("the response body", "max_body_bytes", self.max_body))

    def finish_json(self, plan: Plan, response: Any) -> Any:
        """Record the whole response read into ``plan.data``; ``response`` itself."""
        data = plan.data
        parsed = parse_response(plan.kind, data if isinstance(data, dict) else {})
        plan.req.finish(parsed)
        self._answered(plan, parsed)
        return response  # read already: the client takes its decoded content as is

    def _answered(self, plan: Plan, parsed: ParsedResponse) -> None:
        if plan.kind == "responses":  # a later previous_response_id names its episode
            self.attribution.answered(parsed.response_id, plan.req.episode)

    def tapped(self, plan: Plan, response: Any, *, is_async: bool) -> Any:
        """``response`` with its event stream recorded as the client reads it."""
        sync_tap, async_tap = tap_streams(plan.lib)
        cls = async_tap if is_async else sync_tap
        decoder = EventStreamDecoder(self.max_event, self.max_body)
        after = partial(self._answered, plan)
        tap = EventStreamTap(plan.req, decoder, _sdk_safe, after, self.deadline(plan, response))
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
