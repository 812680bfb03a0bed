"""What the OpenAI and Anthropic client wrappers share: the budgeted endpoint.

An endpoint (``chat.completions``, ``responses``, ``messages``) budgets ``create``
(whole or ``stream=True``), the SDK's ``parse()`` and ``with_raw_response``:
charge the turn before sending, send the notice, retry under the controller's
policy, and record usage, cost and mistakes. Every other attribute is the SDK's,
read from the wrapper's guarded copy of the client (:mod:`budgetmix.adapters._gate`),
which budgets what reaches a model endpoint (``with_streaming_response``, ...) at the
HTTP layer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from budgetmix import bypass
from budgetmix.adapters._deadlines import abounded, bounded, watch_sdk_client
from budgetmix.adapters._live import LiveHandle
from budgetmix.adapters._openai_helpers import (
    AsyncRawResponses,
    HelperResource,
    HelperStreamManager,
    RawResponses,
    RecordingRawResponse,
    afinish_raw,
)
from budgetmix.adapters._streams import AsyncRecordingStream, RecordingStream
from budgetmix.adapters._turn import TurnRequest
from budgetmix.adapters._wire import WireKind, parse_response
from budgetmix.adapters.pricing import DEFAULT_PRICING, Pricing
from budgetmix.controller import BudgetController
from budgetmix.episode import Episode, current_episode

__all__ = [
    "AsyncEndpoint",
    "ClientWrapper",
    "Endpoint",
    "SyncEndpoint",
    "Target",
    "resolve_episode",
]

Target = Episode | BudgetController | None
SyncSleep = Callable[[float], None]
AsyncSleep = Callable[[float], Awaitable[None]]


def resolve_episode(target: Target) -> Episode | None:
    """The episode a wrapped call charges: ``target`` itself, the current episode of
    ``target`` (a controller), or any current episode (``None``); ``None`` = no budget."""
    if isinstance(target, Episode):
        return target
    ep = current_episode()
    if ep is None or (isinstance(target, BudgetController) and ep.controller is not target):
        return None
    return ep


class Endpoint:
    """One endpoint (``chat.completions``, ``responses``, ``messages``): ``create``,
    ``parse``, ``stream`` and ``with_raw_response`` budgeted; every other attribute is the
    SDK's."""

    def __init__(self, owner: ClientWrapper, kind: WireKind, sdk: Any, raw: Any) -> None:
        self._owner, self._kind, self._sdk, self._raw = owner, kind, sdk, raw
        watch_sdk_client(raw)  # a whole body is read within the episode's deadlines

    def _start(self, kwargs: dict[str, Any]) -> TurnRequest | None:
        owner = self._owner
        ep = resolve_episode(owner._target)
        if ep is None:
            bypass.unbudgeted_call(owner, f"budgeted({type(owner._sdk_client).__name__}())")
            return None
        return TurnRequest(
            ep,
            self._kind,
            {k: v for k, v in kwargs.items() if not _omitted(v)},
            owner._pricing,
            sdk_transform=owner._sdk_transform,
            sdk_call=True,
            url=getattr(owner._sdk_client, "base_url", None),
        )

    def __getattr__(self, name: str) -> Any:
        # ``sdk`` is the wrapper's guarded copy (adapters/_gate.py): what is not budgeted
        # here (with_streaming_response, ...) is budgeted at the HTTP layer there
        return getattr(self._sdk, name)

    def _finish(self, req: TurnRequest, result: Any, *, is_async: bool) -> Any:
        if req.stream:
            return AsyncRecordingStream(result, req) if is_async else RecordingStream(result, req)
        req.finish(parse_response(self._kind, result))
        return result

    def _finish_raw(self, req: TurnRequest, raw: Any, *, is_async: bool) -> Any:
        if req.stream:
            return RecordingRawResponse(raw, lambda s: self._finish(req, s, is_async=is_async))
        try:
            parsed = raw.parse()  # it caches: the caller's own parse() is free
        except Exception as exc:  # recorded as inside the turn's call, where create() parses
            raise req.turn.failed(exc) from exc
        self._finish(req, parsed, is_async=is_async)
        return raw


_SDKS = ("openai", "anthropic")


def _omitted(value: Any) -> bool:
    """The SDKs' ``omit`` / ``NOT_GIVEN`` (frameworks pass them, as the Agents SDK passes
    ``stream=omit``): an argument the SDK leaves out of the request, so it is left out
    here too."""
    cls = type(value)
    return cls.__name__ in ("Omit", "NotGiven") and cls.__module__.split(".")[0] in _SDKS


class SyncEndpoint(Endpoint):
    def create(self, **kwargs: Any) -> Any:
        """The SDK's ``create``, budgeted (see the module docstring).

        Raises:
            BudgetExhausted, EarlyStopped: the turn was refused; nothing was sent.
            ConfigError: a cost limit is set and the model has no known price, or the
                request cannot be sent (content that cannot be encoded as JSON, such as
                a lone surrogate, or a shape the notice cannot be added to); nothing
                was charged or sent.
            ProviderError: the call failed after retries (:class:`ResponseFormatError`:
                the provider's response could not be read).
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
        """The OpenAI SDK's ``stream()`` helper, run over the budgeted ``create(stream=True)``:
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
        call = bounded(req.episode, partial(method, **req.sdk_kwargs()))
        return req.turn.call(call, sleep=self._owner._sleep)

    def _raw_call(self, name: str, kwargs: dict[str, Any]) -> Any:
        req = self._start(kwargs)
        if req is None:
            return getattr(self._sdk.with_raw_response, name)(**kwargs)
        raw = self._send(req, getattr(self._raw.with_raw_response, name))
        return self._finish_raw(req, raw, is_async=False)


class AsyncEndpoint(Endpoint):
    async def create(self, **kwargs: Any) -> Any:
        """The SDK's async ``create``, budgeted (see :meth:`SyncEndpoint.create`)."""
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
        return HelperStreamManager(type(self._sdk).stream(resource, **kwargs), resource)

    @property
    def with_raw_response(self) -> AsyncRawResponses:
        """Async twin of :attr:`SyncEndpoint.with_raw_response`."""
        return AsyncRawResponses(self)

    async def _send(self, req: TurnRequest, method: Callable[..., Awaitable[Any]]) -> Any:
        call = abounded(req.episode, partial(method, **req.sdk_kwargs()))
        return await req.turn.acall(call, sleep=self._owner._sleep)

    async def _raw_call(self, name: str, kwargs: dict[str, Any]) -> Any:
        req = self._start(kwargs)
        if req is None:
            return await getattr(self._sdk.with_raw_response, name)(**kwargs)
        raw = await self._send(req, getattr(self._raw.with_raw_response, name))
        return await afinish_raw(self, req, raw)


class ClientWrapper(LiveHandle):
    """A provider client whose model endpoints subclasses budget (they attach them in
    :meth:`_attach_endpoints`); every other attribute is the client's own.

    It passes the type checks frameworks make of the client they are given
    (``isinstance(client, openai.AsyncOpenAI)``, Semantic Kernel's): its ``__class__``
    reads as the wrapped client's (``type()`` still tells the wrapper). A copy or a
    pickle of it is the wrapper itself (:mod:`budgetmix.adapters._live`): DSPy
    deep-copies the client it is given."""

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return type(self.__dict__.get("_sdk_client", self))

    def __init__(
        self,
        client: Any,
        target: Target,
        *,
        pricing: Pricing | None,
        sleep: Any,
        sdk_transform: bool = False,
    ) -> None:
        self._sdk_client = client  # not ``_client``: SDK code reads that as the HTTP client
        self._target = target
        controller = target.controller if isinstance(target, Episode) else target
        if controller is not None:
            bypass.wired(controller, f"budgeted({type(client).__name__}())")
        self._sdk_transform = sdk_transform
        self._pricing = pricing if pricing is not None else DEFAULT_PRICING
        self._sleep = sleep
        # our RetryPolicy governs; SDK retries would hide failures and double the waiting
        self._raw_client = client.with_options(max_retries=0)
        self._attach_endpoints(client, self._raw_client)

    def _attach_endpoints(self, client: Any, raw: Any) -> None:
        """Set the budgeted endpoints over ``client`` (``raw``: its copy without retries)."""

    @property
    def unwrapped(self) -> Any:
        """The client this wraps."""
        return self._sdk_client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sdk_client, name)
