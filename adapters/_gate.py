"""Every request path of a budgeted client: budgeted at the HTTP layer, or refused.

The wrappers budget ``chat.completions``, ``responses`` and ``messages`` at the SDK
level. Everything else a caller reaches through a wrapper (the SDK's low-level
``post`` / ``request`` / ``get`` that LiteLLM sends through, ``with_streaming_response``,
``beta.*``, a resource fetched once and kept) belongs to a copy of the client whose HTTP
client sends through a :class:`SyncGate` / :class:`AsyncGate`. Inside an episode the gate
hands a request to a model endpoint (``POST .../chat/completions``, ``.../responses``,
``.../messages``) to :class:`~budgetmix.adapters.http.BudgetTransport`: the turn is
charged before anything is sent, the notice injected, transient failures retried under
the controller's policy, usage and mistakes read from the JSON or event stream, spans
written. A request to a model endpoint no wire format reads (the legacy text
``.../completions`` and ``.../complete``, ``.../responses/compact``) is refused with
:class:`~budgetmix.ConfigError` naming the path. Any other request, and every request
outside an episode, is sent as it came by the client's own HTTP client (its transport,
proxies and hooks).

The copy keeps the client's own retries for what passes through; a budgeted request has
had the controller's retries already, so its final error status carries
``x-should-retry: false`` (the SDKs obey it) and its final transport error is raised as
:class:`~budgetmix.ProviderError`, which the SDKs raise as is: an SDK retry would charge
another turn.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any, Self

from budgetmix.adapters._endpoints import ClientWrapper, Target, resolve_episode
from budgetmix.adapters._replies import sdk_safe
from budgetmix.adapters._transport import wire_kind
from budgetmix.adapters.http import AsyncBudgetTransport, BudgetTransport
from budgetmix.adapters.pricing import Pricing
from budgetmix.episode import Episode
from budgetmix.exceptions import BudgetmixError, ConfigError
from budgetmix.provider_errors import map_provider_error

__all__ = [
    "HTTP_INSTEAD",
    "AsyncGate",
    "GuardedWrapper",
    "SocketGuard",
    "SyncGate",
    "guarded_client",
    "refuse_in_episode",
]

# model endpoints without a wire format here: sending them inside an episode would skip
# the budget (legacy text completions; a Responses compaction, which runs a model)
_UNREAD_MODEL_PATHS = {
    "/completions": "a legacy text completion",
    "/complete": "a legacy text completion",
    "/responses/compact": "a Responses compaction, which runs a model",
}
#: What to use instead of a WebSocket session inside an episode.
HTTP_INSTEAD = "the HTTP endpoints (create, stream, with_streaming_response)"


def refuse_in_episode(target: Target, what: str, instead: str) -> None:
    """Raise :class:`ConfigError` (SDK-safe) when a call to ``what`` would be made inside
    an episode ``target`` charges; nothing was sent."""
    if resolve_episode(target) is not None:
        raise sdk_safe(
            ConfigError(
                f"{what} is not budgeted by budgetmix, so it is refused inside an episode "
                f"(nothing was sent); use {instead}"
            )
        )


class _Gate:
    """What the sync and async gates share: which requests go through the budget."""

    def __init__(self, http: Any, target: Target) -> None:
        self._http = http  # the client's own HTTP client: it sends
        self._target = target

    def _budgeted(self, request: Any) -> bool:
        path = request.url.path.rstrip("/")
        if wire_kind(request.method, path) is not None:
            return resolve_episode(self._target) is not None
        unread = next((w for p, w in _UNREAD_MODEL_PATHS.items() if path.endswith(p)), None)
        if unread is not None and request.method.upper() == "POST":
            refuse_in_episode(
                self._target,
                f"POST {path} ({unread})",
                "chat.completions.create, responses.create or messages.create",
            )
        return False

    @staticmethod
    def _final(response: Any) -> Any:
        if response.status_code >= 400:  # retried under the controller's policy already
            response.headers["x-should-retry"] = "false"
        return response

    @staticmethod
    def _failed(exc: Exception) -> BaseException:
        return exc if isinstance(exc, BudgetmixError) else sdk_safe(map_provider_error(exc))

    def _transport_target(self) -> Episode | None:
        # the gate resolved the episode already; the transport charges the current one
        # (an explicit episode target: that one), and never opens episodes of its own
        return self._target if isinstance(self._target, Episode) else None


class _Sender:
    """The client's own HTTP client as the transport the budget forwards to."""

    def __init__(self, http: Any) -> None:
        self._http = http

    def handle_request(self, request: Any) -> Any:
        return self._http.send(request, stream=True)

    async def handle_async_request(self, request: Any) -> Any:
        return await self._http.send(request, stream=True)


class SyncGate(_Gate):
    """The transport of a sync guarded client (see the module docstring)."""

    def __init__(
        self, http: Any, target: Target, *, pricing: Pricing | None, sleep: Any = None
    ) -> None:
        super().__init__(http, target)
        self._budget = BudgetTransport(
            _Sender(http), self._transport_target(), pricing=pricing, sleep=sleep
        )

    def handle_request(self, request: Any) -> Any:
        """Budget a model request inside an episode; send any other as it came."""
        if not self._budgeted(request):
            return self._http.send(request, stream=True)
        try:
            return self._final(self._budget.handle_request(request))
        except Exception as exc:
            raise self._failed(exc) from exc

    def close(self) -> None:
        """Close the client's own HTTP client (as closing the client would)."""
        self._http.close()


class AsyncGate(_Gate):
    """The transport of an async guarded client (see the module docstring)."""

    def __init__(
        self, http: Any, target: Target, *, pricing: Pricing | None, sleep: Any = None
    ) -> None:
        super().__init__(http, target)
        self._budget = AsyncBudgetTransport(
            _Sender(http), self._transport_target(), pricing=pricing, sleep=sleep
        )

    async def handle_async_request(self, request: Any) -> Any:
        """Budget a model request inside an episode; send any other as it came."""
        if not self._budgeted(request):
            return await self._http.send(request, stream=True)
        try:
            return self._final(await self._budget.handle_async_request(request))
        except Exception as exc:
            raise self._failed(exc) from exc

    async def aclose(self) -> None:
        """Close the client's own HTTP client."""
        await self._http.aclose()


def _http_lib(http: Any) -> tuple[ModuleType, bool]:
    """The library (``httpx`` or ``httpx2``) of an SDK's HTTP client, and whether it is
    async."""
    for name in ("httpx2", "httpx"):
        lib = sys.modules.get(name)
        if lib is not None and isinstance(http, (lib.Client, lib.AsyncClient)):
            return lib, isinstance(http, lib.AsyncClient)
    raise ConfigError(
        f"client._client: expected an httpx or httpx2 client, got {type(http).__name__}"
    )


def ungated(http: Any) -> Any:
    """The HTTP client behind a guarded client's (``http`` itself when it is no such
    client): a copy made from a wrapper's ``_client`` must not be gated twice."""
    gate = getattr(http, "_transport", None)
    return gate._http if isinstance(gate, _Gate) else http


def guarded_client(client: Any, target: Target, *, pricing: Pricing | None, sleep: Any) -> Any:
    """A copy of the SDK ``client`` whose every request goes through a gate.

    Raises:
        ConfigError: the client's HTTP client is neither an ``httpx`` nor an ``httpx2`` one.
    """
    http = ungated(client._client)
    lib, is_async = _http_lib(http)
    gate = (AsyncGate if is_async else SyncGate)(http, target, pricing=pricing, sleep=sleep)
    # the outer client builds the requests: it carries what the client's own would add
    # (its auth, hooks, proxies and transport act when that one sends)
    outer = (lib.AsyncClient if is_async else lib.Client)(
        transport=gate,
        timeout=http.timeout,
        headers=http.headers,
        params=http.params,
        cookies=http.cookies,
        trust_env=False,
    )
    return client.with_options(http_client=outer)


class GuardedWrapper(ClientWrapper):
    """A :class:`ClientWrapper` whose every attribute that is no budgeted endpoint is
    the guarded copy's (:func:`guarded_client`), so no request path skips the budget."""

    def _attach_endpoints(self, client: Any, raw: Any) -> None:
        self._guarded = guarded_client(
            client, self._target, pricing=self._pricing, sleep=self._sleep
        )
        self._attach(self._guarded, raw)

    def _attach(self, guarded: Any, raw: Any) -> None:
        """Set the budgeted endpoints over ``guarded`` (``raw``: the client without
        retries, which the endpoints send through)."""

    def with_options(self, **options: Any) -> Self:
        """The client's ``with_options`` (alias ``copy``), wrapped the same way (an
        ``http_client`` read from this wrapper's ``_client`` is used ungated)."""
        if options.get("http_client") is not None:
            options["http_client"] = ungated(options["http_client"])
        copy = self._sdk_client.with_options(**options)
        return type(self)(
            copy,
            self._target,
            pricing=self._pricing,
            sleep=self._sleep,
            sdk_transform=self._sdk_transform,
        )

    copy = with_options

    def __getattr__(self, name: str) -> Any:
        guarded = self.__dict__.get("_guarded")
        if guarded is None:  # not built yet (or unpickling): no attribute to hand over
            raise AttributeError(name)
        return getattr(guarded, name)


class SocketGuard:
    """A resource whose ``connect*`` methods (WebSocket sessions, which no transport
    sees) are refused inside an episode; the rest, and sub-resources, are the SDK's."""

    def __init__(self, parent: Any, owner: ClientWrapper, path: str) -> None:
        # the resource is looked up on first use: the SDK imports its types then (the
        # realtime and beta ones take seconds)
        self._parent, self._owner, self._path = parent, owner, path

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        resource = getattr(self._parent, self._path.rsplit(".", 1)[-1])
        value = getattr(resource, name)
        path = f"{self._path}.{name}"
        if name.startswith("connect") and callable(value):
            target = self._owner._target

            def connect(*args: Any, **kwargs: Any) -> Any:
                refuse_in_episode(target, f"{path}() (a WebSocket session)", HTTP_INSTEAD)
                return value(*args, **kwargs)

            return connect
        if hasattr(value, "_client") and not callable(value):  # a sub-resource
            return SocketGuard(
                getattr(self._parent, self._path.rsplit(".", 1)[-1]), self._owner, path
            )
        return value
