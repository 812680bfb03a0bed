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
  :meth:`TracingHandle.flush` waits at most its timeout and returns False when it ran
  out or an export failed, and the exit waits at most ``shutdown_timeout_s`` and logs
  one warning with the count of spans never exported;
* a :class:`RedactingSpanExporter` in front of every exporter, so API keys and
  authorization values never leave the process even when a caller puts them on a span;
* for ``console`` and ``otlp``, a ``MeterProvider`` exporting to the same place
  (``metrics=`` or ``OTEL_METRICS_EXPORTER`` choose otherwise; ``OTEL_TRACES_EXPORTER``
  names the span exporter when the call does not).
"""

from __future__ import annotations

import atexit
import logging
import os
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, cast, get_args
from urllib.parse import urlsplit, urlunsplit

from budgetmix._deps import require
from budgetmix.exceptions import ConfigError
from budgetmix.telemetry.exporters import (
    METRICS_EXPORTER_ENV,
    TRACES_EXPORTER_ENV,
    MetricsName,
    OnceMetricExporter,
    env_exporter,
)
from budgetmix.telemetry.jsonl import JsonlSpanExporter
from budgetmix.telemetry.processor import (
    DEFAULT_MAX_EXPORT_BATCH_SIZE,
    DEFAULT_MAX_QUEUE_SIZE,
    BoundedRunner,
    CountingBatchSpanProcessor,
    ExportStats,
    check_sizes,
    check_timeout,
)
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    MetricExporter,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SpanExporter

__all__ = ["DEFAULT_SHUTDOWN_TIMEOUT_S", "ExporterName", "TracingHandle", "configure_tracing"]

_logger = logging.getLogger("budgetmix.telemetry")

ExporterName = Literal["console", "jsonl", "otlp", "none"]
DEFAULT_SHUTDOWN_TIMEOUT_S = 5.0
_DEFAULT_SERVICE_NAME = "budgetmix"

# ---------------------------------------------------------------- configure


class TracingHandle:
    """What :func:`configure_tracing` built: the providers and their life cycle.

    Attributes:
        provider: the SDK ``TracerProvider``; get tracers from it when not global.
        meter_provider: the SDK ``MeterProvider``, or None for ``jsonl``/``none``.
        processor: the batch processor, or None for ``none``.
        is_global: whether ``provider`` became the process-wide tracer provider.
        shutdown_timeout_s: how long :meth:`shutdown` (and so the exit) waits for the
            last export.
    """

    def __init__(
        self,
        provider: TracerProvider,
        processor: CountingBatchSpanProcessor | None,
        meter_provider: MeterProvider | None,
        is_global: bool,
        shutdown_timeout_s: float = DEFAULT_SHUTDOWN_TIMEOUT_S,
    ) -> None:
        self.provider = provider
        self.processor = processor
        self.meter_provider = meter_provider
        self.is_global = is_global
        self.shutdown_timeout_s = check_timeout("shutdown_timeout_s", shutdown_timeout_s)
        self._closed = False
        # Metric exports block like span exports; started now, as 3.12 refuses at exit.
        self._meter_runner = None if meter_provider is None else BoundedRunner("budgetmix-metrics")
        atexit.register(self.shutdown)

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Export everything queued now, waiting at most ``timeout_s`` seconds.

        Returns:
            True when every span and metric was exported in time; False when the
            time ran out or an export failed, after logging one warning with the
            count of spans not exported (also in :meth:`stats`).

        Raises:
            ConfigError: ``timeout_s`` is not a finite number of seconds > 0.
        """
        timeout_s = check_timeout("timeout_s", timeout_s)
        deadline = time.monotonic() + timeout_s
        ok = self.provider.force_flush(int(timeout_s * 1000))
        meters, runner = self.meter_provider, self._meter_runner
        if meters is not None and runner is not None:
            left = max(0.0, deadline - time.monotonic())
            done = runner.call("flush", lambda: meters.force_flush(int(left * 1000)), left)
            ok = done is True and ok
        if not ok:
            stats = self.stats()
            _logger.warning(
                "budgetmix: flush did not complete within %.3g s: %d of %d spans not exported"
                " (%d failed to export); see TracingHandle.stats()",
                timeout_s,
                stats.lost,
                stats.ended,
                stats.failed,
            )
        return ok

    def stats(self) -> ExportStats:
        """Span counts; ``lost`` is exact after :meth:`flush`."""
        if self.processor is None:
            return ExportStats(0, 0, 0)
        return self.processor.stats()

    def shutdown(self, timeout_s: float | None = None) -> None:
        """Flush for at most ``timeout_s`` (default :attr:`shutdown_timeout_s`), then stop
        exporting; idempotent, also run at interpreter exit. Spans never exported are
        counted in one logged warning.

        Raises:
            ConfigError: ``timeout_s`` is not None nor a finite number of seconds > 0.
        """
        budget = (
            self.shutdown_timeout_s if timeout_s is None else check_timeout("timeout_s", timeout_s)
        )
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.shutdown)
        deadline = time.monotonic() + budget
        if self.processor is not None:
            self.processor.shutdown(int(budget * 1000))
        self.provider.shutdown()  # other processors; ours is already stopped
        if self.meter_provider is not None:
            left_ms = max(1.0, (deadline - time.monotonic()) * 1000)
            try:
                self.meter_provider.shutdown(timeout_millis=left_ms)
            except Exception:  # the SDK raises when a reader ran out of time
                _logger.debug("budgetmix: metric shutdown incomplete", exc_info=True)
        if self._meter_runner is not None:
            self._meter_runner.close()
        stats = self.stats()
        if stats.lost:
            _logger.warning(
                "budgetmix: %d of %d spans were never exported (%d failed to export,"
                " %d dropped or still queued at shutdown)",
                stats.lost,
                stats.ended,
                stats.failed,
                stats.lost - stats.failed,
            )


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


def _require_otlp() -> None:
    for signal in ("metric_exporter", "trace_exporter"):
        module = f"opentelemetry.exporter.otlp.proto.http.{signal}"
        require("opentelemetry-exporter-otlp-proto-http", "otlp", module=module)


# With endpoint/headers None the exporters read OTEL_EXPORTER_OTLP_[TRACES_|METRICS_]
# ENDPOINT/HEADERS/TIMEOUT/COMPRESSION/CERTIFICATE themselves; we add nothing.
def _otlp_span_exporter(endpoint: str | None, headers: Mapping[str, str] | None) -> SpanExporter:
    _require_otlp()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    hdrs = dict(headers) if headers is not None else None
    if endpoint is None:
        return OTLPSpanExporter(headers=hdrs)
    return OTLPSpanExporter(_signal_url(endpoint, "v1/traces"), headers=hdrs)


def _otlp_metric_exporter(
    endpoint: str | None, headers: Mapping[str, str] | None
) -> MetricExporter | None:
    """The OTLP metric exporter behind :class:`OnceMetricExporter` (None: a custom
    traces path says nothing about where metrics go)."""
    _require_otlp()
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    hdrs = dict(headers) if headers is not None else None
    if endpoint is None:
        inner = OTLPMetricExporter(headers=hdrs)
    else:
        url = _signal_url(endpoint, "v1/metrics")
        if url is None:
            return None
        inner = OTLPMetricExporter(url, headers=hdrs)
    return OnceMetricExporter(inner, str(getattr(inner, "_endpoint", endpoint)))


def configure_tracing(
    exporter: ExporterName | None = None,
    *,
    metrics: MetricsName | None = None,
    path: str | Path = "runs/traces.jsonl",
    service_name: str = _DEFAULT_SERVICE_NAME,
    endpoint: str | None = None,
    headers: Mapping[str, str] | None = None,
    max_queue_size: int = DEFAULT_MAX_QUEUE_SIZE,
    max_export_batch_size: int = DEFAULT_MAX_EXPORT_BATCH_SIZE,
    set_global: bool = True,
    shutdown_timeout_s: float = DEFAULT_SHUTDOWN_TIMEOUT_S,
) -> TracingHandle:
    """Build a tracer provider exporting budgetmix spans, for apps without OTel set-up.

    Args:
        exporter: ``"jsonl"`` appends spans to ``path``; ``"console"`` prints them;
            ``"otlp"`` posts OTLP/HTTP protobuf to a collector; ``"none"`` exports
            nothing (spans still get ids). None: ``OTEL_TRACES_EXPORTER``, else jsonl.
        metrics: ``"console"``, ``"otlp"`` or ``"none"``; None: ``OTEL_METRICS_EXPORTER``,
            else with console or otlp spans. An OTLP endpoint refusing metrics (HTTP
            404/405) is named in one warning and sent no more.
        path: the JSONL file (parents are created).
        service_name: the ``service.name`` resource attribute; ``OTEL_SERVICE_NAME``
            wins over the default, an explicit value wins over it.
            ``OTEL_RESOURCE_ATTRIBUTES`` is merged in.
        endpoint: OTLP base URL (``http://host:4318``, ``/v1/traces`` is appended) or
            full traces URL. None: the exporter reads ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``
            or ``OTEL_EXPORTER_OTLP_ENDPOINT``, else ``http://localhost:4318``.
        headers: extra OTLP request headers, over those in ``OTEL_EXPORTER_OTLP_HEADERS``.
        max_queue_size, max_export_batch_size: spans buffered; spans per export call.
        set_global: install the providers process-wide so budgetmix (and any other
            API-only library) uses them. OpenTelemetry allows this once per process:
            if a tracer provider is already set, a ``RuntimeWarning`` is issued and
            the handle's ``is_global`` is False.
        shutdown_timeout_s: how long :meth:`TracingHandle.shutdown`, and so the exit,
            waits for the last export before giving up with one warning that counts
            the spans never exported.

    Returns:
        A :class:`TracingHandle`; its ``shutdown`` also runs at interpreter exit.

    Raises:
        ConfigError: an unknown ``exporter``, ``metrics`` or ``OTEL_*_EXPORTER`` value, a
            bad size, ``shutdown_timeout_s`` or ``endpoint``, ``endpoint``/``headers``
            without ``"otlp"``, or a ``path`` that cannot be opened.
        MissingExtraError: ``"otlp"`` without the ``otlp`` extra.
    """
    exporter, metrics = _chosen(exporter, metrics)
    _check_arguments(exporter, metrics, endpoint, headers, max_queue_size, max_export_batch_size)
    check_timeout("shutdown_timeout_s", shutdown_timeout_s)
    resource = _resource(service_name)
    span_exporter = _span_exporter(exporter, path, endpoint, headers)
    metric_exporter = _metric_exporter(metrics, endpoint, headers)
    processor = None if span_exporter is None else CountingBatchSpanProcessor(
        span_exporter, max_queue_size=max_queue_size, max_export_batch_size=max_export_batch_size
    )  # fmt: skip
    provider, meter_provider = _providers(resource, processor, metric_exporter)
    is_global = set_global and _install_global(provider, meter_provider)
    return TracingHandle(provider, processor, meter_provider, is_global, shutdown_timeout_s)


def _chosen(exporter: str | None, metrics: str | None) -> tuple[ExporterName, MetricsName]:
    """The span and metric exporters: the arguments, else the OTEL_*_EXPORTER variables,
    else the defaults (jsonl spans; metrics with console or otlp spans)."""
    if exporter is None:
        exporter = env_exporter(TRACES_EXPORTER_ENV, get_args(ExporterName)) or "jsonl"
    if exporter not in get_args(ExporterName):
        raise ConfigError(f"exporter: expected one of {get_args(ExporterName)}, got {exporter!r}")
    if metrics is None:
        metrics = env_exporter(METRICS_EXPORTER_ENV, get_args(MetricsName))
    if metrics is None:
        metrics = exporter if exporter in ("console", "otlp") else "none"
    if metrics not in get_args(MetricsName):
        raise ConfigError(f"metrics: expected one of {get_args(MetricsName)}, got {metrics!r}")
    return cast(ExporterName, exporter), cast(MetricsName, metrics)


def _check_arguments(
    exporter: str,
    metrics: str,
    endpoint: str | None,
    headers: Mapping[str, str] | None,
    max_queue_size: int,
    max_export_batch_size: int,
) -> None:
    """Raise ConfigError for OTLP settings without OTLP, or bad sizes."""
    otlp = "otlp" in (exporter, metrics)
    if not otlp and (endpoint is not None or headers is not None):
        raise ConfigError("endpoint: endpoint and headers apply only to exporter='otlp'")
    check_sizes(max_queue_size, max_export_batch_size)


def _resource(service_name: str) -> Resource:
    """The resource; ``OTEL_SERVICE_NAME`` replaces the default service name only."""
    if service_name == _DEFAULT_SERVICE_NAME and os.environ.get("OTEL_SERVICE_NAME"):
        service_name = os.environ["OTEL_SERVICE_NAME"]
    return Resource.create({SERVICE_NAME: service_name})


def _span_exporter(
    exporter: ExporterName,
    path: str | Path,
    endpoint: str | None,
    headers: Mapping[str, str] | None,
) -> SpanExporter | None:
    """The span exporter ``exporter`` names (None for ``none``)."""
    if exporter == "jsonl":
        return JsonlSpanExporter(path)
    if exporter == "console":
        return ConsoleSpanExporter()
    if exporter == "otlp":
        return _otlp_span_exporter(endpoint, headers)
    return None


def _metric_exporter(
    metrics: MetricsName, endpoint: str | None, headers: Mapping[str, str] | None
) -> MetricExporter | None:
    """The metric exporter ``metrics`` names (None for ``none``)."""
    if metrics == "console":
        return ConsoleMetricExporter()
    if metrics == "otlp":
        return _otlp_metric_exporter(endpoint, headers)
    return None


def _providers(
    resource: Resource,
    processor: CountingBatchSpanProcessor | None,
    metric_exporter: MetricExporter | None,
) -> tuple[TracerProvider, MeterProvider | None]:
    """The tracer provider over ``processor`` and, with a metric exporter, a meter provider."""
    # atexit is handled by TracingHandle, which flushes before shutting down.
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    if processor is not None:
        provider.add_span_processor(processor)
    if metric_exporter is None:
        return provider, None
    reader = PeriodicExportingMetricReader(metric_exporter)
    return provider, MeterProvider(
        resource=resource, metric_readers=[reader], shutdown_on_exit=False
    )


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
