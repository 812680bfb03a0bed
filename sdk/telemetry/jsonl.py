"""The JSONL span exporter (the embedded default) and its reader."""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from budgetmix.exceptions import ConfigError
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.util.types import Attributes

__all__ = ["JsonlSpanExporter", "read_jsonl_spans", "span_to_dict"]

_logger = logging.getLogger("budgetmix.telemetry")


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
