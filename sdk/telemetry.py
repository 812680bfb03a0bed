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
import functools
import json
import logging
import math
import os
import re
import threading
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal, get_args
from urllib.parse import urlsplit, urlunsplit

from budgetmix.exceptions import ConfigError, MissingExtraError
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    MetricExporter,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.trace import Link, Status
from opentelemetry.util.types import Attributes, AttributeValue

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

REDACTED = "[REDACTED]"
# Attribute keys whose whole value is a credential: matched on the end of the key so
# `http.request.header.authorization` and `x-api-key` match, `gen_ai.usage.input_tokens` not.
_SECRET_KEY = re.compile(
    r"(?:^|[._\-])(?:authorization|api[_\-]?key|apikey|secret|password|passwd|"
    r"(?:access|refresh|auth|id|session|bearer)[_\-]token|cookie|private[_\-]key)$",
    re.IGNORECASE,
)
# Credentials recognisable by their shape, wherever they appear inside a string.
_SECRET_VALUE = re.compile(
    r"\bsk-[A-Za-z0-9_\-]{8,}"  # OpenAI (sk-, sk-proj-) and Anthropic (sk-ant-) keys
    r"|\b[Bb]earer\s+[A-Za-z0-9._~+/=\-]{8,}"
    r"|\bgh[pousr]_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}"
    r"|\bhf_[A-Za-z0-9]{20,}|\bxox[abprs]-[A-Za-z0-9\-]{10,}"
    r"|\bAKIA[0-9A-Z]{16}\b|\bAIza[0-9A-Za-z_\-]{30,}"
)


def _scrub_text(text: str) -> str:
    return _SECRET_VALUE.sub(REDACTED, text)


def _scrub_value(value: AttributeValue) -> AttributeValue:
    if isinstance(value, str):
        return _scrub_text(value)
    if isinstance(value, Sequence) and any(isinstance(v, str) for v in value):
        return tuple(_scrub_text(v) if isinstance(v, str) else v for v in value)
    return value


@functools.lru_cache(maxsize=4096)
def _is_secret_key(key: str) -> bool:
    # Spans repeat the same few keys: cache the verdict instead of re-running the regex.
    return _SECRET_KEY.search(key) is not None


def redact_attributes(attributes: Attributes) -> dict[str, AttributeValue]:
    """Return a copy of ``attributes`` with credentials masked as :data:`REDACTED`.

    A key named like a credential (``authorization``, ``api_key``, ``x-api-key``,
    ``*_secret``, ``password``, ``*_token`` other than usage counts, ``cookie``) has
    its whole value replaced; inside any other string value, substrings shaped like
    keys (``sk-...``, ``sk-ant-...``, ``Bearer ...``, GitHub/HF/Slack/AWS/Google
    tokens) are replaced. Never raises.
    """
    out: dict[str, AttributeValue] = {}
    for key, value in (attributes or {}).items():
        out[key] = REDACTED if _is_secret_key(key) else _scrub_value(value)
    return out


def _has_secret(attributes: Attributes) -> bool:
    for key, value in (attributes or {}).items():
        if _is_secret_key(key):
            return True
        if isinstance(value, str):
            if _SECRET_VALUE.search(value):
                return True
        elif isinstance(value, Sequence) and any(
            isinstance(v, str) and _SECRET_VALUE.search(v) for v in value
        ):
            return True
    return False


def _redacted_or_none(attributes: Attributes) -> dict[str, AttributeValue] | None:
    """The redacted copy, or None when nothing needs masking (the common, copy-free case)."""
    return redact_attributes(attributes) if _has_secret(attributes) else None


class _RedactedSpan(ReadableSpan):
    """A redacted copy that keeps the original's dropped-item counts for the exporters."""

    def __init__(self, original: ReadableSpan, **fields: Any) -> None:
        super().__init__(**fields)
        self._original = original

    @property
    def dropped_attributes(self) -> int:
        return self._original.dropped_attributes

    @property
    def dropped_events(self) -> int:
        return self._original.dropped_events

    @property
    def dropped_links(self) -> int:
        return self._original.dropped_links


class RedactingSpanExporter(SpanExporter):
    """Wraps an exporter so no credential on a span, event, link or resource reaches it.

    Span names, status descriptions, attribute values (span, event, link, resource)
    are scrubbed with the rules of :func:`redact_attributes`. Spans that need no
    masking are passed through unchanged, so the cost is one regex scan per string.
    """

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self._resource_cache: tuple[Resource, Resource] | None = None

    def _resource(self, resource: Resource) -> Resource:
        # One provider has one resource: cache its redacted copy instead of re-scanning.
        cached = self._resource_cache
        if cached is not None and cached[0] is resource:
            return cached[1]
        attrs = _redacted_or_none(resource.attributes)
        redacted = resource if attrs is None else Resource(attrs, resource.schema_url)
        self._resource_cache = (resource, redacted)
        return redacted

    def _is_clean(self, span: ReadableSpan, resource: Resource) -> bool:
        return (
            resource is span.resource
            and not _has_secret(span.attributes)
            and not _SECRET_VALUE.search(span.name)
            and not _SECRET_VALUE.search(span.status.description or "")
            and not any(
                _has_secret(e.attributes) or _SECRET_VALUE.search(e.name) for e in span.events
            )
            and not any(_has_secret(link.attributes) for link in span.links)
        )

    def redact(self, span: ReadableSpan) -> ReadableSpan:
        """Return ``span`` itself when clean, else a masked copy."""
        resource = self._resource(span.resource)
        if self._is_clean(span, resource):
            return span
        status = span.status
        if status.description:
            status = Status(status.status_code, _scrub_text(status.description))
        return _RedactedSpan(
            span,
            name=_scrub_text(span.name),
            context=span.context,
            parent=span.parent,
            resource=resource,
            attributes=redact_attributes(span.attributes),
            events=[
                Event(_scrub_text(e.name), redact_attributes(e.attributes), e.timestamp)
                for e in span.events
            ],
            links=[Link(link.context, redact_attributes(link.attributes)) for link in span.links],
            kind=span.kind,
            status=status,
            start_time=span.start_time,
            end_time=span.end_time,
            instrumentation_scope=span.instrumentation_scope,
        )

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Redact, then hand the batch to the wrapped exporter."""
        return self.inner.export([self.redact(span) for span in spans])

    def shutdown(self) -> None:
        """Shut the wrapped exporter down."""
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Flush the wrapped exporter."""
        return self.inner.force_flush(timeout_millis)


# ---------------------------------------------------------------- JSONL


def _json_value(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN/Infinity
    if isinstance(value, (tuple, list)):
        return [_json_value(v) for v in value]
    return value


def _json_attrs(attributes: Attributes) -> dict[str, Any]:
    return {k: _json_value(v) for k, v in (attributes or {}).items()}


def span_to_dict(span: ReadableSpan) -> dict[str, Any]:
    """The JSON-ready form of a finished span (one line of a JSONL trace file).

    Keys: ``name``, ``trace_id``/``span_id``/``parent_span_id`` (hex, parent None
    for a root), ``kind`` and ``status.code`` (enum names), ``start_ns``/``end_ns``,
    ``attributes``, ``events`` (``name``, ``time_ns``, ``attributes``), ``links``,
    ``resource`` (attributes) and ``scope`` (instrumentation scope name/version).
    """
    ctx = span.context
    scope = span.instrumentation_scope
    return {
        "name": span.name,
        "trace_id": trace.format_trace_id(ctx.trace_id) if ctx else None,
        "span_id": trace.format_span_id(ctx.span_id) if ctx else None,
        "parent_span_id": trace.format_span_id(span.parent.span_id) if span.parent else None,
        "kind": span.kind.name,
        "start_ns": span.start_time,
        "end_ns": span.end_time,
        "status": {"code": span.status.status_code.name, "description": span.status.description},
        "attributes": _json_attrs(span.attributes),
        "events": [
            {"name": e.name, "time_ns": e.timestamp, "attributes": _json_attrs(e.attributes)}
            for e in span.events
        ],
        "links": [
            {
                "trace_id": trace.format_trace_id(link.context.trace_id),
                "span_id": trace.format_span_id(link.context.span_id),
                "attributes": _json_attrs(link.attributes),
            }
            for link in span.links
        ],
        "resource": _json_attrs(span.resource.attributes),
        "scope": {"name": scope.name, "version": scope.version} if scope else None,
    }


class JsonlSpanExporter(SpanExporter):
    """Appends one JSON object per span (see :func:`span_to_dict`) to a file.

    Each batch is written with one call and flushed, under a lock, so concurrent
    exports never interleave lines and a crash loses at most the batch in flight.

    Raises:
        ConfigError: the file cannot be opened for appending (``path``).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file: IO[str] | None = self.path.open("a", encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"path: cannot append to {self.path}: {exc}") from exc
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Write the batch; FAILURE after shutdown or on an I/O error (logged)."""
        text = "".join(
            json.dumps(span_to_dict(span), separators=(",", ":"), default=str) + "\n"
            for span in spans
        )
        with self._lock:
            if self._file is None:
                return SpanExportResult.FAILURE
            try:
                self._file.write(text)
                self._file.flush()
            except OSError:
                _logger.exception("budgetmix: writing spans to %s failed", self.path)
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Batches are flushed as written; nothing is pending."""
        return True

    def shutdown(self) -> None:
        """Close the file; later exports fail."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def read_jsonl_spans(path: str | Path) -> list[dict[str, Any]]:
    """Read a JSONL trace file written by :class:`JsonlSpanExporter`, in file order.

    Raises:
        FileNotFoundError: no file at ``path``.
        ConfigError: a line is not a JSON object (the message names path and line).
    """
    spans: list[dict[str, Any]] = []
    with Path(path).open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"path: {path}:{lineno} is not JSON: {exc}") from exc
            if not isinstance(record, dict):
                raise ConfigError(f"path: {path}:{lineno} is not a JSON object")
            spans.append(record)
    return spans


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
