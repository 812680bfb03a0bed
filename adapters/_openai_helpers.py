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
``parse()`` is free); a streamed raw response parses to a recording stream.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from budgetmix.adapters._streams import AsyncRecordingStream, RecordingStream

if TYPE_CHECKING:
    from budgetmix.adapters._endpoints import Endpoint

__all__ = [
    "AsyncRawResponses",
    "HelperResource",
    "HelperStreamManager",
    "RawResponses",
    "RecordingRawResponse",
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
