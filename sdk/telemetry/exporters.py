"""Which exporters a run gets: the ``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER``
variables, and an OTLP metric exporter that reports a refusing endpoint once.

A backend that takes traces but has no metrics endpoint (Arize Phoenix answers
``/v1/metrics`` with 405) would otherwise log ``Failed to export metrics batch code:
405`` at every export. :class:`OnceMetricExporter` turns that into one warning naming
the endpoint and the status, and stops sending metrics there for the rest of the run.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any, Literal

from budgetmix.exceptions import ConfigError
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData

__all__ = [
    "METRICS_EXPORTER_ENV",
    "TRACES_EXPORTER_ENV",
    "MetricsName",
    "OnceMetricExporter",
    "env_exporter",
]

_logger = logging.getLogger("budgetmix.telemetry")

TRACES_EXPORTER_ENV = "OTEL_TRACES_EXPORTER"
METRICS_EXPORTER_ENV = "OTEL_METRICS_EXPORTER"
MetricsName = Literal["console", "otlp", "none"]
# the logger the OTLP/HTTP metric exporter reports failed exports on
_SDK_METRICS_LOGGER = "opentelemetry.exporter.otlp.proto.http.metric_exporter"


def env_exporter(variable: str, allowed: tuple[str, ...]) -> str | None:
    """The exporter ``variable`` names (one of ``allowed``), or None when it is unset.

    Raises:
        ConfigError: a value outside ``allowed``, or a list of several (budgetmix
            exports each signal to one place); the message names the variable.
    """
    raw = os.environ.get(variable, "").strip().lower()
    if not raw:
        return None
    if raw not in allowed:
        raise ConfigError(f"{variable}: expected one of {allowed}, got {raw!r}")
    return raw


class _Capture(logging.Filter):
    """Takes the SDK's "Failed to export metrics batch code: ..." records off its logger
    while this thread is inside :meth:`OnceMetricExporter.export`, keeping the code."""

    def __init__(self) -> None:
        super().__init__()
        self.local = threading.local()

    def filter(self, record: logging.LogRecord) -> bool:
        box = getattr(self.local, "box", None)
        if box is None:
            return True  # not one of our exports: the SDK's line as usual
        message = str(record.msg)
        if message.startswith("Failed to export"):
            args = record.args if isinstance(record.args, tuple) else ()
            box.append(args[1] if "code" in message and len(args) > 1 else None)
            return False
        return not message.startswith("Transient error")  # its final failure is reported


_CAPTURE = _Capture()
logging.getLogger(_SDK_METRICS_LOGGER).addFilter(_CAPTURE)


class OnceMetricExporter(MetricExporter):
    """An OTLP metric exporter whose endpoint, if it refuses metrics (an HTTP 4xx such as
    404 or 405: no metrics endpoint there), is reported in one warning; nothing more is
    sent there. Other failures are logged once each, by status code."""

    def __init__(self, inner: Any, endpoint: str) -> None:
        super().__init__(
            preferred_temporality=inner._preferred_temporality,
            preferred_aggregation=inner._preferred_aggregation,
        )
        self.inner = inner
        self.endpoint = endpoint
        self.refused: int | None = None  # the status of a refusal, once there was one
        self._reported: set[Any] = set()

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        """Export through the OTLP exporter, unless the endpoint refused metrics before."""
        if self.refused is not None:
            return MetricExportResult.SUCCESS  # reported once; nothing to retry
        box: list[Any] = []
        _CAPTURE.local.box = box
        try:
            result: MetricExportResult = self.inner.export(metrics_data, timeout_millis, **kwargs)
        finally:
            _CAPTURE.local.box = None
        for code in box:
            self._report(code)
        return result

    def _report(self, code: Any) -> None:
        if isinstance(code, int) and 400 <= code < 500 and code not in (408, 429):
            self.refused = code
            _logger.warning(
                "budgetmix: %s refuses metrics (HTTP %d); metrics are not sent there for the"
                " rest of this run (set %s=none to skip them)",
                self.endpoint,
                code,
                METRICS_EXPORTER_ENV,
            )
        elif code not in self._reported:
            self._reported.add(code)
            _logger.warning(
                "budgetmix: metrics export to %s failed (%s); further failures of this kind"
                " are not logged",
                self.endpoint,
                f"HTTP {code}" if code is not None else "no response",
            )

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        """Flush the OTLP exporter."""
        return bool(self.inner.force_flush(timeout_millis))

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        """Shut the OTLP exporter down."""
        self.inner.shutdown(timeout_millis=timeout_millis, **kwargs)
