"""Tracing set-up for applications that have no OpenTelemetry set-up of their own.

budgetmix library code only talks to the OpenTelemetry *API*, so its spans join
whatever tracer provider the host application installed. Applications without
one call :func:`configure_tracing` once at start-up::

    from budgetmix.telemetry import configure_tracing

    handle = configure_tracing("jsonl", path="runs/traces.jsonl")
    ...  # run episodes
    handle.shutdown()  # also registered with atexit

What it builds:

* a ``TracerProvider`` with a batch processor whose queue (65536 spans by default)
  absorbs a burst of 10k spans; the SDK default of 2048 drops the oldest spans
  when the exporter falls behind, with nothing but a log line to show for it.
  :meth:`TracingHandle.stats` counts what ended, what was exported and what was lost;
* a :class:`RedactingSpanExporter` in front of every exporter, so API keys and
  authorization values never leave the process even when a caller puts them on a span;
* for ``console`` and ``otlp``, a ``MeterProvider`` exporting to the same place.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args
from urllib.parse import urlsplit, urlunsplit

from budgetmix.exceptions import ConfigError, MissingExtraError
from budgetmix.jsonl_export import JsonlSpanExporter, read_jsonl_spans, span_to_dict
from budgetmix.redaction import REDACTED, RedactingSpanExporter, redact_attributes
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    MetricExporter,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
    SpanExportResult,
)

__all__ = [
    "DEFAULT_MAX_EXPORT_BATCH_SIZE",
    "DEFAULT_MAX_QUEUE_SIZE",
    "REDACTED",
    "CountingBatchSpanProcessor",
    "ExportStats",
    "ExporterName",
    "JsonlSpanExporter",
    "RedactingSpanExporter",
    "TracingHandle",
    "configure_tracing",
    "read_jsonl_spans",
    "redact_attributes",
    "span_to_dict",
]

_logger = logging.getLogger(__name__)

ExporterName = Literal["console", "jsonl", "otlp", "none"]
DEFAULT_MAX_QUEUE_SIZE = 65536
DEFAULT_MAX_EXPORT_BATCH_SIZE = 512
_DEFAULT_SERVICE_NAME = "budgetmix"

# ---------------------------------------------------------------- redaction


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
    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.exported = 0
        self.failed = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        # Only the processor's single worker (or a flush holding its lock) calls this.
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
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


def _check_sizes(max_queue_size: int, max_export_batch_size: int) -> None:
    if max_queue_size < 1:
        raise ConfigError(f"max_queue_size: must be >= 1, got {max_queue_size}")
    if not 1 <= max_export_batch_size <= max_queue_size:
        raise ConfigError(
            f"max_export_batch_size: must be in [1, max_queue_size={max_queue_size}],"
            f" got {max_export_batch_size}"
        )


class CountingBatchSpanProcessor(BatchSpanProcessor):
    """A ``BatchSpanProcessor`` with a large queue that counts what it loses.

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
        _check_sizes(max_queue_size, max_export_batch_size)
        self._counter = _CountingExporter(RedactingSpanExporter(exporter) if redact else exporter)
        self._ended = 0
        self._ended_lock = threading.Lock()
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

    def stats(self) -> ExportStats:
        """Counts so far; call ``force_flush`` first for an exact ``lost``."""
        return ExportStats(self._ended, self._counter.exported, self._counter.failed)


# ---------------------------------------------------------------- configure


class TracingHandle:
    """What :func:`configure_tracing` built: the providers and their life cycle.

    Attributes:
        provider: the SDK ``TracerProvider``; get tracers from it when not global.
        meter_provider: the SDK ``MeterProvider``, or None for ``jsonl``/``none``.
        processor: the batch processor, or None for ``none``.
        is_global: whether ``provider`` became the process-wide tracer provider.
    """

    def __init__(
        self,
        provider: TracerProvider,
        processor: CountingBatchSpanProcessor | None,
        meter_provider: MeterProvider | None,
        is_global: bool,
    ) -> None:
        self.provider = provider
        self.processor = processor
        self.meter_provider = meter_provider
        self.is_global = is_global
        self._closed = False
        atexit.register(self.shutdown)

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Export everything queued; False when the timeout ran out first."""
        millis = int(timeout_s * 1000)
        ok = self.provider.force_flush(millis)
        if self.meter_provider is not None:
            ok = self.meter_provider.force_flush(millis) and ok
        return ok

    def stats(self) -> ExportStats:
        """Span counts; ``lost`` is exact after :meth:`flush`."""
        if self.processor is None:
            return ExportStats(0, 0, 0)
        return self.processor.stats()

    def shutdown(self) -> None:
        """Flush and stop exporting; idempotent, also run at interpreter exit."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.shutdown)
        self.provider.shutdown()
        if self.meter_provider is not None:
            self.meter_provider.shutdown()


def _signal_url(endpoint: str, signal: str) -> str | None:
    """Full URL for ``signal`` ("v1/traces") from a base or a traces URL, else None."""
    parts = urlsplit(endpoint)
    if not parts.scheme or not parts.netloc:
        raise ConfigError(f"endpoint: expected http(s)://host:port[/v1/traces], got {endpoint!r}")
    path = parts.path.rstrip("/")
    if path.endswith("/v1/traces"):
        path = path.removesuffix("v1/traces") + signal
    elif path == "":
        path = "/" + signal
    elif signal != "v1/traces":
        return None  # a custom traces path says nothing about where metrics go
    return urlunsplit(parts._replace(path=path))


def _otlp_exporters(
    endpoint: str | None, headers: Mapping[str, str] | None
) -> tuple[SpanExporter, MetricExporter | None]:
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as exc:
        raise MissingExtraError("opentelemetry-exporter-otlp-proto-http", "otlp") from exc
    # With endpoint/headers None the exporters read OTEL_EXPORTER_OTLP_[TRACES_|METRICS_]
    # ENDPOINT/HEADERS/TIMEOUT/COMPRESSION/CERTIFICATE themselves; we add nothing.
    hdrs = dict(headers) if headers is not None else None
    if endpoint is None:
        return OTLPSpanExporter(headers=hdrs), OTLPMetricExporter(headers=hdrs)
    traces_url = _signal_url(endpoint, "v1/traces")
    metrics_url = _signal_url(endpoint, "v1/metrics")
    metric_exporter = None if metrics_url is None else OTLPMetricExporter(metrics_url, headers=hdrs)
    return OTLPSpanExporter(traces_url, headers=hdrs), metric_exporter


def configure_tracing(
    exporter: ExporterName = "jsonl",
    *,
    path: str | Path = "runs/traces.jsonl",
    service_name: str = _DEFAULT_SERVICE_NAME,
    endpoint: str | None = None,
    headers: Mapping[str, str] | None = None,
    max_queue_size: int = DEFAULT_MAX_QUEUE_SIZE,
    max_export_batch_size: int = DEFAULT_MAX_EXPORT_BATCH_SIZE,
    set_global: bool = True,
) -> TracingHandle:
    """Build a tracer provider exporting budgetmix spans, for apps without OTel set-up.

    Args:
        exporter: ``"jsonl"`` appends spans to ``path``; ``"console"`` prints them;
            ``"otlp"`` posts OTLP/HTTP protobuf to a collector; ``"none"`` exports
            nothing (spans still get ids, e.g. for log correlation).
        path: the JSONL file (parents are created).
        service_name: the ``service.name`` resource attribute; ``OTEL_SERVICE_NAME``
            wins over the default, an explicit value wins over it.
            ``OTEL_RESOURCE_ATTRIBUTES`` is merged in.
        endpoint: OTLP base URL (``http://host:4318``, ``/v1/traces`` is appended) or
            full traces URL. None: the exporter reads ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``
            or ``OTEL_EXPORTER_OTLP_ENDPOINT``, else ``http://localhost:4318``.
        headers: extra OTLP request headers, over those in ``OTEL_EXPORTER_OTLP_HEADERS``.
        max_queue_size: spans buffered while the exporter is busy.
        max_export_batch_size: spans per export call.
        set_global: install the providers process-wide so budgetmix (and any other
            API-only library) uses them. OpenTelemetry allows this once per process:
            if a tracer provider is already set, a ``RuntimeWarning`` is issued and
            the handle's ``is_global`` is False.

    Returns:
        A :class:`TracingHandle`; its ``shutdown`` also runs at interpreter exit.

    Raises:
        ConfigError: an unknown ``exporter``, a bad size or ``endpoint``, ``endpoint``/
            ``headers`` without ``"otlp"``, or a ``path`` that cannot be opened.
        MissingExtraError: ``"otlp"`` without the ``otlp`` extra.
    """
    if exporter not in get_args(ExporterName):
        raise ConfigError(f"exporter: expected one of {get_args(ExporterName)}, got {exporter!r}")
    if exporter != "otlp" and (endpoint is not None or headers is not None):
        raise ConfigError("endpoint: endpoint and headers apply only to exporter='otlp'")
    _check_sizes(max_queue_size, max_export_batch_size)
    if service_name == _DEFAULT_SERVICE_NAME and os.environ.get("OTEL_SERVICE_NAME"):
        service_name = os.environ["OTEL_SERVICE_NAME"]
    resource = Resource.create({SERVICE_NAME: service_name})

    span_exporter: SpanExporter | None = None
    metric_exporter: MetricExporter | None = None
    if exporter == "jsonl":
        span_exporter = JsonlSpanExporter(path)
    elif exporter == "console":
        span_exporter, metric_exporter = ConsoleSpanExporter(), ConsoleMetricExporter()
    elif exporter == "otlp":
        span_exporter, metric_exporter = _otlp_exporters(endpoint, headers)

    processor = None
    if span_exporter is not None:
        processor = CountingBatchSpanProcessor(
            span_exporter,
            max_queue_size=max_queue_size,
            max_export_batch_size=max_export_batch_size,
        )
    # atexit is handled by TracingHandle, which flushes before shutting down.
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    if processor is not None:
        provider.add_span_processor(processor)
    meter_provider = None
    if metric_exporter is not None:
        reader = PeriodicExportingMetricReader(metric_exporter)
        meter_provider = MeterProvider(
            resource=resource, metric_readers=[reader], shutdown_on_exit=False
        )

    is_global = False
    if set_global:
        is_global = _install_global(provider, meter_provider)
    return TracingHandle(provider, processor, meter_provider, is_global)


def _install_global(provider: TracerProvider, meter_provider: MeterProvider | None) -> bool:
    # The API ignores a second set_tracer_provider with only a log line; say so louder.
    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        warnings.warn(
            "configure_tracing: a global tracer provider is already set; budgetmix spans"
            " go to it, not to this handle (use set_global=False and handle.provider)",
            RuntimeWarning,
            stacklevel=3,
        )
        return False
    trace.set_tracer_provider(provider)
    if meter_provider is not None:
        # Like tracing, a meter provider the host already set is kept (the API logs it).
        metrics.set_meter_provider(meter_provider)
    return trace.get_tracer_provider() is provider
