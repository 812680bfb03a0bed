"""The batch span processor :func:`~budgetmix.telemetry.configure_tracing` installs.

:class:`CountingBatchSpanProcessor` is the SDK's ``BatchSpanProcessor`` with a queue
large enough for a burst, counts of what it exported and lost, and a ``force_flush``
and ``shutdown`` that honour their timeouts (the SDK's ignore them: against a dead
collector its flush blocked for as long as the exporter retried, then returned True).
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from budgetmix.exceptions import ConfigError
from budgetmix.telemetry.redaction import RedactingSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

__all__ = [
    "DEFAULT_MAX_EXPORT_BATCH_SIZE",
    "DEFAULT_MAX_QUEUE_SIZE",
    "CountingBatchSpanProcessor",
    "ExportStats",
]

_logger = logging.getLogger("budgetmix.telemetry")

DEFAULT_MAX_QUEUE_SIZE = 65536
DEFAULT_MAX_EXPORT_BATCH_SIZE = 512

# ---------------------------------------------------------------- bounded waits


class _Job:
    __slots__ = ("done", "fn", "key", "ok")

    def __init__(self, key: str, fn: Callable[[], object]) -> None:
        self.key = key
        self.fn = fn
        self.ok = False
        self.done = threading.Event()

    def run(self) -> None:
        try:
            self.ok = bool(self.fn())
        except Exception:  # e.g. the SDK's MetricsTimeoutError: the caller reports False
            _logger.debug("budgetmix: %s raised", self.key, exc_info=True)
        finally:
            self.done.set()


class BoundedRunner:
    """One daemon thread that runs blocking calls for callers who wait at most a timeout.

    An export may block for as long as its exporter retries (the OTLP exporter backs
    off for ~7 s per batch against a dead collector); the caller gives up at its
    timeout and the call finishes in the background. The thread starts with the
    runner because Python 3.12 refuses new threads in atexit handlers, where the last
    flush runs. At most one call per key waits behind the running one, so flushes
    repeated against a dead collector do not pile up.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._waiting: dict[str, _Job] = {}
        self._thread: threading.Thread | None = None
        self._closed = False
        self._ensure_thread()

    def _ensure_thread(self) -> bool:
        if self._thread is not None and self._thread.is_alive():
            return True
        # None yet, or a forked child's copy whose thread stayed in the parent.
        self._waiting.clear()
        thread = threading.Thread(target=self._work, name=self._name, daemon=True)
        try:
            thread.start()
        except RuntimeError:  # "can't create new thread at interpreter shutdown"
            return False
        self._thread = thread
        return True

    def call(self, key: str, fn: Callable[[], object], timeout_s: float) -> bool | None:
        """``bool(fn())`` (False if it raised), or None when it is still running after
        ``timeout_s``. A call of ``key`` already waiting to start is joined, not doubled."""
        with self._lock:
            threaded = not self._closed and self._ensure_thread()
            job = self._waiting.get(key) if threaded else None
            if job is None:
                job = _Job(key, fn)
                if threaded:
                    self._waiting[key] = job
                    self._jobs.put(job)
        if not threaded:
            job.run()  # no thread (any more): run it here, unbounded
            return job.ok
        return job.ok if job.done.wait(timeout_s) else None

    def close(self) -> None:
        """End the thread once the calls already queued have run; later calls run inline."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._jobs.put(None)

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            with self._lock:
                if self._waiting.get(job.key) is job:
                    del self._waiting[job.key]  # started: a later call queues afresh
            job.run()


# ---------------------------------------------------------------- processor


@dataclass(frozen=True)
class ExportStats:
    """Span counts of one processor. ``lost`` is meaningful after a flush."""

    ended: int
    exported: int
    failed: int

    @property
    def lost(self) -> int:
        """Spans that ended but never reached the exporter (queue overflow) or failed."""
        return self.ended - self.exported


class _CountingExporter(SpanExporter):
    """Counts what the exporter took; once shut down, fails every batch at once."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.exported = 0
        self.failed = 0
        self._closed = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        # Only the processor's worker or the one flush thread calls this, never both at
        # once (the processor's export lock), so the counts need no lock of their own.
        if self._closed:
            self.failed += len(spans)
            return SpanExportResult.FAILURE
        try:
            result = self.inner.export(spans)
        except Exception:
            self.failed += len(spans)
            raise
        if result is SpanExportResult.SUCCESS:
            self.exported += len(spans)
        else:
            self.failed += len(spans)
        return result

    def shutdown(self) -> None:
        # The OTLP exporter's shutdown also ends the back-off of a retry in flight.
        if not self._closed:
            self._closed = True
            self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


def check_sizes(max_queue_size: int, max_export_batch_size: int) -> None:
    """Raise :class:`ConfigError` naming the size that is not usable."""
    if max_queue_size < 1:
        raise ConfigError(f"max_queue_size: must be >= 1, got {max_queue_size}")
    if not 1 <= max_export_batch_size <= max_queue_size:
        raise ConfigError(
            f"max_export_batch_size: must be in [1, max_queue_size={max_queue_size}],"
            f" got {max_export_batch_size}"
        )


def check_timeout(name: str, value: object) -> float:
    """``value`` as seconds: a finite number > 0, else :class:`ConfigError` naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{name}: expected seconds as a number, got {value!r}")
    if isinstance(value, int) and abs(value) >= 2**53:  # beyond float precision (or repr)
        raise ConfigError(f"{name}: must be a finite number of seconds > 0, got a huge int")
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"{name}: must be a finite number of seconds > 0, got {value!r}")
    return float(value)


# The SDK leaves it unannotated; this is its signature.
_sdk_shutdown: Callable[[BatchSpanProcessor], None] = BatchSpanProcessor.shutdown


class CountingBatchSpanProcessor(BatchSpanProcessor):
    """A ``BatchSpanProcessor`` with a large queue that counts what it loses, and whose
    ``force_flush`` and ``shutdown`` honour their timeouts.

    The SDK's ``force_flush`` ignores its timeout and returns True even when every
    export failed; this one exports on a helper thread, waits at most the timeout,
    and returns False when the time ran out or an export failed meanwhile.

    Args:
        exporter: where batches go; wrapped in :class:`RedactingSpanExporter` unless
            ``redact`` is False.
        max_queue_size: spans held while the exporter is busy (the oldest are dropped
            beyond it).
        max_export_batch_size: spans per ``export`` call.

    Raises:
        ConfigError: a size is not positive or the batch exceeds the queue.
    """

    def __init__(
        self,
        exporter: SpanExporter,
        *,
        max_queue_size: int = DEFAULT_MAX_QUEUE_SIZE,
        max_export_batch_size: int = DEFAULT_MAX_EXPORT_BATCH_SIZE,
        redact: bool = True,
    ) -> None:
        check_sizes(max_queue_size, max_export_batch_size)
        self._counter = _CountingExporter(RedactingSpanExporter(exporter) if redact else exporter)
        self._ended = 0
        self._ended_lock = threading.Lock()
        self._runner = BoundedRunner("budgetmix-span-flush")
        self._closing = False
        super().__init__(
            self._counter,
            max_queue_size=max_queue_size,
            max_export_batch_size=max_export_batch_size,
        )

    def on_end(self, span: ReadableSpan) -> None:
        """Count a sampled span, then queue it."""
        if span.context is not None and span.context.trace_flags.sampled:
            with self._ended_lock:
                self._ended += 1
        super().on_end(span)

    def force_flush(self, timeout_millis: int | None = None) -> bool:
        """Export everything queued, waiting at most ``timeout_millis`` (30 s if None).

        Returns False when the time ran out first (the export goes on in the
        background), an export failed meanwhile, or the processor was shut down.
        """
        failed_before = self._counter.failed
        timeout_s = (30_000 if timeout_millis is None else timeout_millis) / 1000
        finished = self._runner.call("flush", super().force_flush, max(timeout_s, 0.0))
        return finished is True and self._counter.failed == failed_before

    def shutdown(self, timeout_millis: int = 30_000) -> None:
        """Flush for at most ``timeout_millis``, then stop: the exporter is shut down
        first, which ends its retries, so what is still queued fails at once (and is
        counted in :meth:`stats`) instead of holding up the exit. Idempotent."""
        if self._closing:
            return
        self._closing = True
        deadline = time.monotonic() + timeout_millis / 1000
        self.force_flush(timeout_millis)
        self._counter.shutdown()
        self._runner.call("shutdown", self._stop, max(0.0, deadline - time.monotonic()))
        self._runner.close()

    def _stop(self) -> bool:
        _sdk_shutdown(self)  # joins the SDK's worker, which drains what is left
        return True

    def stats(self) -> ExportStats:
        """Counts so far; call ``force_flush`` first for an exact ``lost``."""
        return ExportStats(self._ended, self._counter.exported, self._counter.failed)
