"""Budgeting the OpenAI SDK's helpers: ``stream()`` and ``with_raw_response``.

``chat.completions.stream()`` and ``responses.stream()`` are built by the SDK on its
resource's ``create(stream=True)``: the helper is run over a :class:`_HelperResource`
whose ``create`` is the budgeted one, so the SDK's own event accumulation (parsed
content, tool-call events, ``get_final_completion()``) is untouched while the turn,
the notice, retries and usage go through budgetmix. The resource exposes only
``create`` (and ``retrieve``, which resumes an existing response without generating
anything new): should a future SDK build its helper on anything else, the helper
fails loudly before sending instead of running without a budget.

``with_raw_response`` returns the SDK's raw response wrapper (headers, status);
usage is read by parsing it once (``parse()`` caches, so the caller's own
``parse()`` is free; awaited where it is a coroutine, as on Anthropic's async client);
a streamed raw response parses to a recording stream.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from budgetmix.adapters._streams import AsyncRecordingStream, RecordingStream

if TYPE_CHECKING:
    from budgetmix.adapters._endpoints import Endpoint
    from budgetmix.adapters._turn import TurnRequest

__all__ = [
    "AsyncRawResponses",
    "AsyncRecordingRawResponse",
    "HelperResource",
    "HelperStreamManager",
    "RawResponses",
    "RecordingRawResponse",
    "afinish_raw",
]


class HelperResource:
    """What the SDK's stream helper sees as its resource: the budgeted ``create``."""

    def __init__(self, endpoint: Endpoint) -> None:
        self._endpoint = endpoint
        self.streams: list[Any] = []

    def create(self, **kwargs: Any) -> Any:
        result = self._endpoint.create(**kwargs)
        if isinstance(result, (RecordingStream, AsyncRecordingStream)):
            self.streams.append(result)
        return result

    def retrieve(self, *args: Any, **kwargs: Any) -> Any:
        return self._endpoint._sdk.retrieve(*args, **kwargs)


class HelperStreamManager:
    """The SDK's stream manager (sync or async); on exit, a stream left unfinished is
    recorded too (closing a recording stream is idempotent)."""

    def __init__(self, inner: Any, resource: HelperResource) -> None:
        self._inner, self._resource = inner, resource

    def __enter__(self) -> Any:
        return self._inner.__enter__()

    def __exit__(self, *exc: Any) -> None:
        try:
            self._inner.__exit__(*exc)
        finally:
            for stream in self._resource.streams:
                stream.close()

    async def __aenter__(self) -> Any:
        return await self._inner.__aenter__()

    async def __aexit__(self, *exc: Any) -> None:
        try:
            await self._inner.__aexit__(*exc)
        finally:
            for stream in self._resource.streams:
                await stream.close()


class RecordingRawResponse:
    """A streamed raw response whose ``parse()`` returns the recording stream."""

    def __init__(self, inner: Any, wrap: Callable[[Any], Any]) -> None:
        self._inner, self._wrap = inner, wrap
        self._stream: Any = None

    def parse(self, **kwargs: Any) -> Any:
        if kwargs:  # another target type: the caller's own reading, as the SDK does it
            return self._inner.parse(**kwargs)
        if self._stream is None:
            self._stream = self._wrap(self._inner.parse())
        return self._stream

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class AsyncRecordingRawResponse(RecordingRawResponse):
    """:class:`RecordingRawResponse` over an SDK raw response whose ``parse()`` is a
    coroutine (Anthropic's async ``with_raw_response``)."""

    async def parse(self, **kwargs: Any) -> Any:
        if kwargs:
            return await self._inner.parse(**kwargs)
        if self._stream is None:
            self._stream = self._wrap(await self._inner.parse())
        return self._stream


async def afinish_raw(endpoint: Endpoint, req: TurnRequest, raw: Any) -> Any:
    """An async endpoint's raw response, recorded on ``req``: usage read by awaiting
    ``parse()`` once when it is a coroutine (the SDK caches it, so the caller's own is
    free); a streamed one records as it is read."""
    if not inspect.iscoroutinefunction(getattr(raw, "parse", None)):
        return endpoint._finish_raw(req, raw, is_async=True)
    if req.stream:
        return AsyncRecordingRawResponse(raw, lambda s: endpoint._finish(req, s, is_async=True))
    try:
        parsed = await raw.parse()
    except Exception as exc:  # recorded as inside the turn's call, where create() parses
        raise req.turn.failed(exc) from exc
    endpoint._finish(req, parsed, is_async=True)
    return raw


class RawResponses:
    """``endpoint.with_raw_response``: ``create`` and ``parse``, budgeted."""

    def __init__(self, endpoint: Any) -> None:
        self._endpoint = endpoint

    def create(self, **kwargs: Any) -> Any:
        return self._endpoint._raw_call("create", kwargs)

    def parse(self, **kwargs: Any) -> Any:
        return self._endpoint._raw_call("parse", kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._endpoint._sdk.with_raw_response, name)


class AsyncRawResponses(RawResponses):
    """Async twin of :class:`RawResponses`."""

    async def create(self, **kwargs: Any) -> Any:
        return await self._endpoint._raw_call("create", kwargs)

    async def parse(self, **kwargs: Any) -> Any:
        return await self._endpoint._raw_call("parse", kwargs)
