"""Stream proxies that record a streamed turn's usage when the stream ends.

The turn was charged before the stream opened; these wrap the SDK's stream
(``openai.Stream``, ``anthropic.Stream`` and their async twins), fold every
event into the request's accumulator, and record usage, cost and mistakes once:
when iteration ends, or when the stream is closed early (then whatever arrived
is recorded, usually without usage). A failure mid-stream is recorded as a
``provider_error`` and raised as :class:`~budgetmix.ProviderError` (an event the SDK
could not read, such as one nested too deep, as
:class:`~budgetmix.ResponseFormatError`). Everything
else (``.response``, ``.close()``, context management) behaves like the SDK's.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from budgetmix.adapters._turn import TurnRequest

__all__ = ["AsyncRecordingStream", "RecordingStream"]


class _Recorder:
    __slots__ = ("_acc", "_done", "_inner", "_req")

    def __init__(self, inner: Any, req: TurnRequest) -> None:
        self._inner = inner
        self._req = req
        self._acc = req.accumulator()
        self._done = False

    def _finish(self) -> None:
        if not self._done:
            self._done = True
            self._req.finish(self._acc.finish())

    def _failed(self, exc: BaseException) -> BaseException:
        self._done = True
        return self._req.turn.failed(exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class RecordingStream(_Recorder):
    """Sync stream proxy: iterate it like the SDK stream it wraps."""

    __slots__ = ("_it",)

    def __init__(self, inner: Any, req: TurnRequest) -> None:
        super().__init__(inner, req)
        self._it = iter(inner)

    def __iter__(self) -> RecordingStream:
        return self

    def __next__(self) -> Any:
        try:
            item = next(self._it)
        except StopIteration:
            self._finish()
            raise
        except Exception as exc:
            if self._done:
                raise
            raise self._failed(exc) from exc
        self._acc.feed(item)
        return item

    def close(self) -> None:
        """Close the SDK stream and record what arrived."""
        try:
            self._inner.close()
        finally:
            self._finish()

    def __enter__(self) -> RecordingStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncRecordingStream(_Recorder):
    """Async stream proxy: ``async for`` it like the SDK stream it wraps."""

    __slots__ = ("_it",)

    def __init__(self, inner: Any, req: TurnRequest) -> None:
        super().__init__(inner, req)
        self._it = inner.__aiter__()

    def __aiter__(self) -> AsyncRecordingStream:
        return self

    async def __anext__(self) -> Any:
        try:
            item = await self._it.__anext__()
        except StopAsyncIteration:
            self._finish()
            raise
        except Exception as exc:
            if self._done:
                raise
            raise self._failed(exc) from exc
        self._acc.feed(item)
        return item

    async def close(self) -> None:
        """Close the SDK stream and record what arrived."""
        try:
            result = self._inner.close()
            if inspect.isawaitable(result):
                await result
        finally:
            self._finish()

    async def aclose(self) -> None:
        await self.close()

    async def __aenter__(self) -> AsyncRecordingStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
