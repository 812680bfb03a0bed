"""Streamed responses, recorded once: one I/O-free recorder and its sync and async drivers.

The turn was charged before the stream opened. A :class:`StreamRecorder` folds each
event into the request's stream reader and records usage, cost and mistakes once:
when the stream ends, or when it is closed early (then whatever arrived is recorded,
usually without usage); a failure mid-stream is recorded on the turn instead, and
``raise_as`` says what is raised in its place. It is fed SDK event objects
(:class:`RecordingStream`, :class:`AsyncRecordingStream`: the wrappers' proxies of
``openai.Stream``, ``anthropic.Stream`` and their async twins, which raise the mapped
:class:`~budgetmix.ProviderError`), or the bytes of a ``text/event-stream`` body through
the pure SSE parser (:class:`EventStreamTap`, in the HTTP transport's byte streams,
which raise what the SDKs can take). :class:`BodyLimitTap` only counts a body against
its limit. :func:`relay` and :func:`arelay` are the drivers: they hand every item on
unchanged. Everything else of a proxied stream (``.response``, ``.close()``, context
management) behaves like the SDK's.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from budgetmix.adapters._deadlines import ReadDeadline, socket_of
from budgetmix.adapters._sse import EventStreamDecoder, limit_error, read_json, unreadable_event
from budgetmix.exceptions import BudgetExhausted, ProviderError
from budgetmix.telemetry.log_redaction import redact_log_records

if TYPE_CHECKING:
    from budgetmix.adapters._turn import TurnRequest
    from budgetmix.adapters._wire import ParsedResponse

__all__ = [
    "AsyncRecordingStream",
    "BodyLimitTap",
    "EventStreamTap",
    "RecordingStream",
    "StreamRecorder",
    "arelay",
    "relay",
    "tap_streams",
]

T = TypeVar("T")

# Both paths (the wrappers' streams and the transport) import this module: from then on
# the HTTP clients' and provider SDKs' log records are redacted (a URL's query string).
redact_log_records()

#: ``(exception, the turn's mapped error or None when nothing was recorded)`` -> what to raise
RaiseAs = Callable[[BaseException, BaseException | None], BaseException]


def mapped_error(exc: BaseException, mapped: BaseException | None) -> BaseException:
    """The wrappers raise the turn's mapped error (``exc`` itself once recorded)."""
    return mapped if mapped is not None else exc


class _Sink:
    """Records a stream's failure once on ``req``'s turn (``None``: the caller records);
    ``deadline``: when reading must end (:mod:`budgetmix.adapters._deadlines`)."""

    __slots__ = ("_done", "_raise_as", "_req", "deadline")

    def __init__(
        self, req: TurnRequest | None, raise_as: RaiseAs, deadline: ReadDeadline | None = None
    ) -> None:
        self._req = req
        self._raise_as = raise_as
        self._done = False
        self.deadline = deadline

    def feed(self, item: Any) -> None:
        """Take one item of the stream (it is handed on unchanged)."""

    def finish(self) -> None:
        """The stream ended or was closed (idempotent)."""
        if self.deadline is not None:
            self.deadline.done()

    def failed(self, exc: BaseException) -> BaseException:
        """Record a failure mid-stream (once); the exception to raise in its place."""
        mapped = None
        if not self._done and self._req is not None:
            self._done = True
            mapped = self._req.turn.failed(exc)
        return self._raise_as(exc, mapped)

    def cut_off(self, exc: BaseException | None) -> BaseException | None:
        """The deadline's error when it was due (the I/O error that followed the cut,
        or a stream that ended after it, becomes it); else ``exc``."""
        deadline = self.deadline
        if deadline is None:
            return exc
        if deadline.expired is None or isinstance(exc, (BudgetExhausted, ProviderError)):
            deadline.done()
            return exc
        error = deadline.error()
        deadline.done()
        error.__cause__ = exc
        return error

    def fail(self, exc: BaseException) -> NoReturn:
        """Record ``exc`` and raise what replaces it (``from exc``), or ``exc`` itself."""
        exc = self.cut_off(exc) or exc
        if isinstance(exc, BudgetExhausted):
            # the wall budget ran out mid-read: what arrived is recorded and the turn stays
            # charged, as when a whole body is cut off inside the transport's call
            self.finish()
            raised = self._raise_as(exc, None)
        else:
            raised = self.failed(exc)
        if raised is exc:
            raise exc
        raise raised from exc


class StreamRecorder(_Sink):
    """Folds a stream's events into its turn; records the response once, at the end
    (``after``: told the parsed response then)."""

    __slots__ = ("_acc", "_after")

    def __init__(
        self,
        req: TurnRequest,
        raise_as: RaiseAs = mapped_error,
        after: Callable[[ParsedResponse], None] | None = None,
        deadline: ReadDeadline | None = None,
    ) -> None:
        super().__init__(req, raise_as, deadline)
        self._acc = req.accumulator()
        self._after = after

    def feed(self, item: Any) -> None:
        """Fold one event in (called per streamed token: keep it lean)."""
        self._acc.feed(item)

    def finish(self) -> None:
        """Record what arrived (idempotent)."""
        super().finish()
        if not self._done and self._req is not None:
            self._done = True
            parsed = self._acc.finish()
            self._req.finish(parsed)
            if self._after is not None:
                self._after(parsed)


class EventStreamTap(StreamRecorder):
    """A :class:`StreamRecorder` fed the bytes of a ``text/event-stream`` body: each
    complete event's data is read as JSON (anything else carries nothing for the budget)."""

    __slots__ = ("_decoder",)

    def __init__(
        self,
        req: TurnRequest,
        decoder: EventStreamDecoder,
        raise_as: RaiseAs,
        after: Callable[[ParsedResponse], None] | None = None,
        deadline: ReadDeadline | None = None,
    ) -> None:
        super().__init__(req, raise_as, after, deadline)
        self._decoder = decoder

    def feed(self, item: bytes) -> None:
        """Read a chunk of the body, before the client sees it.

        Raises:
            ResponseFormatError: an event or the body is over its limit, or an event's
                data is not JSON that can be read (bad JSON, bad UTF-8, nested too deep):
                the client's own parser would raise its raw error on it.
        """
        for data in self._decoder.feed(item):
            if not data or data == b"[DONE]":
                continue
            try:
                event = read_json(data)
            except RecursionError:
                raise unreadable_event("has data nested too deep to read") from None
            except ValueError as exc:
                why = f"has data that is not JSON ({type(exc).__name__})"
                raise unreadable_event(why) from None
            self._acc.feed(event)


class BodyLimitTap(_Sink):
    """Counts a passing body against ``max_body_bytes`` (the caller reads it whole)."""

    __slots__ = ("_limit", "_size")

    def __init__(
        self,
        req: TurnRequest | None,
        max_body_bytes: int,
        raise_as: RaiseAs,
        deadline: ReadDeadline | None = None,
    ) -> None:
        super().__init__(req, raise_as, deadline)
        self._limit = max_body_bytes
        self._size = 0

    def feed(self, item: bytes) -> None:
        """Count a chunk.

        Raises:
            ResponseFormatError: the body is over the limit.
        """
        self._size += len(item)
        if self._size > self._limit:
            raise limit_error("the response body", "max_body_bytes", self._limit)


# -- drivers ---------------------------------------------------------------------------
def relay(inner: Iterable[T], sink: _Sink) -> Iterator[T]:
    """Every item of ``inner``, handed to ``sink`` and on, unchanged; within the sink's
    read deadline, if it has one."""
    deadline = sink.deadline
    try:
        for item in inner:
            if deadline is not None:
                deadline.touch()
            sink.feed(item)
            yield item
    except Exception as exc:
        sink.fail(exc)
    _ended(sink)


async def arelay(inner: AsyncIterable[T], sink: _Sink) -> AsyncIterator[T]:
    """The async twin of :func:`relay`."""
    deadline = sink.deadline
    try:
        async for item in inner:
            if deadline is not None:
                deadline.touch()
            sink.feed(item)
            yield item
    except Exception as exc:
        sink.fail(exc)
    _ended(sink)


def _ended(sink: _Sink) -> None:
    """The stream ended: a cut-off one fails with the deadline's error, else it is recorded."""
    cut = sink.cut_off(None)
    if cut is not None:
        sink.fail(cut)
    sink.finish()


def wrapper_deadline(stream: Any, req: TurnRequest) -> ReadDeadline:
    """The read deadline of an SDK stream (its ``.response`` is the httpx response)."""
    return ReadDeadline(req.episode, sock=socket_of(getattr(stream, "response", None)))


class RecordingStream:
    """A budgeted SDK stream: iterate it like the SDK stream it wraps."""

    __slots__ = ("_inner", "_it", "_recorder")

    def __init__(self, inner: Any, req: TurnRequest) -> None:
        self._inner = inner
        self._recorder = StreamRecorder(req, deadline=wrapper_deadline(inner, req))
        self._it = relay(iter(inner), self._recorder)

    def __iter__(self) -> RecordingStream:
        return self

    def __next__(self) -> Any:
        return next(self._it)

    def close(self) -> None:
        """Close the SDK stream and record what arrived."""
        try:
            self._inner.close()
        finally:
            self._recorder.finish()

    def __enter__(self) -> RecordingStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class AsyncRecordingStream:
    """A budgeted async SDK stream: ``async for`` it like the SDK stream it wraps."""

    __slots__ = ("_inner", "_it", "_recorder")

    def __init__(self, inner: Any, req: TurnRequest) -> None:
        self._inner = inner
        self._recorder = StreamRecorder(req, deadline=wrapper_deadline(inner, req))
        self._it = arelay(inner.__aiter__(), self._recorder)

    def __aiter__(self) -> AsyncRecordingStream:
        return self

    async def __anext__(self) -> Any:
        return await anext(self._it)

    async def close(self) -> None:
        """Close the SDK stream and record what arrived."""
        try:
            result = self._inner.close()
            if inspect.isawaitable(result):
                await result
        finally:
            self._recorder.finish()

    async def aclose(self) -> None:
        await self.close()

    async def __aenter__(self) -> AsyncRecordingStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@functools.cache
def tap_streams(lib: ModuleType) -> tuple[type[Any], type[Any]]:
    """Byte streams of ``lib`` (``httpx`` or ``httpx2``), sync and async, that relay each
    chunk of the stream they wrap through a sink (:class:`EventStreamTap`,
    :class:`BodyLimitTap`)."""

    class SyncTap(lib.SyncByteStream):  # type: ignore[name-defined,misc]
        def __init__(self, inner: Any, tap: _Sink) -> None:
            self._inner, self._tap = inner, tap

        def __iter__(self) -> Iterator[bytes]:
            return relay(self._inner, self._tap)

        def close(self) -> None:
            try:
                self._inner.close()
            finally:
                self._tap.finish()

    class AsyncTap(lib.AsyncByteStream):  # type: ignore[name-defined,misc]
        def __init__(self, inner: Any, tap: _Sink) -> None:
            self._inner, self._tap = inner, tap

        def __aiter__(self) -> AsyncIterator[bytes]:
            return arelay(self._inner, self._tap)

        async def aclose(self) -> None:
            try:
                await self._inner.aclose()
            finally:
                self._tap.finish()

    return SyncTap, AsyncTap
