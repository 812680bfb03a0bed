"""Telemetry: everything that turns budgetmix spans into exported, credential-free data.

budgetmix library code only talks to the OpenTelemetry *API*; this package is the
part that touches the SDK, for applications without an OpenTelemetry set-up of
their own (and for tests)::

    from budgetmix.telemetry import configure_tracing

    handle = configure_tracing("jsonl", path="runs/traces.jsonl")

One module per job:

* :mod:`.configure`: :func:`configure_tracing` and the :class:`TracingHandle` it returns;
* :mod:`.processor`: :class:`CountingBatchSpanProcessor`, a batch processor that
  counts what it lost and honours its timeouts;
* :mod:`.jsonl`: :class:`JsonlSpanExporter` and :func:`read_jsonl_spans`;
* :mod:`.redaction`: :func:`redact_text`, :func:`redact_content`, :func:`redact_data`,
  :class:`RedactingSpanExporter` and the log redaction (:func:`redact_log_records`,
  :class:`RedactingLogFilter`): no credential leaves the process;
* :mod:`.otlp_receiver`: :class:`OTLPReceiver`, a loopback OTLP/HTTP collector for
  tests and examples (the ``otlp`` extra).
"""

from __future__ import annotations

from budgetmix.telemetry.configure import (
    DEFAULT_SHUTDOWN_TIMEOUT_S,
    ExporterName,
    TracingHandle,
    configure_tracing,
)
from budgetmix.telemetry.jsonl import JsonlSpanExporter, read_jsonl_spans, span_to_dict
from budgetmix.telemetry.log_redaction import (
    REDACTED_LOGGERS,
    RedactingLogFilter,
    redact_log_records,
)
from budgetmix.telemetry.otlp_receiver import OTLPReceiver, ReceivedRequest, decode_trace_request
from budgetmix.telemetry.processor import (
    DEFAULT_MAX_EXPORT_BATCH_SIZE,
    DEFAULT_MAX_QUEUE_SIZE,
    CountingBatchSpanProcessor,
    ExportStats,
)
from budgetmix.telemetry.redaction import (
    REDACTED,
    RedactingSpanExporter,
    redact_attributes,
    redact_content,
    redact_data,
    redact_text,
)

__all__ = [
    "DEFAULT_MAX_EXPORT_BATCH_SIZE",
    "DEFAULT_MAX_QUEUE_SIZE",
    "DEFAULT_SHUTDOWN_TIMEOUT_S",
    "REDACTED",
    "REDACTED_LOGGERS",
    "CountingBatchSpanProcessor",
    "ExportStats",
    "ExporterName",
    "JsonlSpanExporter",
    "OTLPReceiver",
    "ReceivedRequest",
    "RedactingLogFilter",
    "RedactingSpanExporter",
    "TracingHandle",
    "configure_tracing",
    "decode_trace_request",
    "read_jsonl_spans",
    "redact_attributes",
    "redact_content",
    "redact_data",
    "redact_log_records",
    "redact_text",
    "span_to_dict",
]
