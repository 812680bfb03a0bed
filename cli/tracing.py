"""The ``--trace`` option of ``budgetmix demo`` and ``budgetmix eval``: where the run's
spans go, and one line with their true count.

``jsonl`` writes ``<out>/traces.jsonl``; ``console`` prints spans; ``otlp`` posts them
to the collector the standard variables name (``OTEL_EXPORTER_OTLP_ENDPOINT``,
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, ``..._HEADERS``; default
``http://localhost:4318``); ``OTEL_METRICS_EXPORTER`` and ``OTEL_SERVICE_NAME`` apply
too. When the process already has a tracer provider (an ``opentelemetry-instrument``
run, say), the spans go to it, as every OpenTelemetry library's do, and the line counts
the budgetmix spans that ended there instead of saying "0 exported".
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from budgetmix.telemetry import ExporterName, TracingHandle, configure_tracing
from budgetmix.telemetry.exporters import TRACES_EXPORTER_ENV, env_exporter
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

__all__ = ["TRACE_CHOICES", "RunTracing", "add_trace_argument", "start_tracing"]

TRACE_CHOICES = ("jsonl", "console", "otlp", "none")


class _EndedCounter(SpanProcessor):
    """Counts the budgetmix spans ending on a provider budgetmix did not set up."""

    def __init__(self) -> None:
        self.ended = 0
        self._lock = threading.Lock()

    def on_end(self, span: ReadableSpan) -> None:
        """Count ``span`` when budgetmix wrote it."""
        scope = span.instrumentation_scope
        if scope is not None and scope.name == "budgetmix":
            with self._lock:
                self.ended += 1


@dataclass
class RunTracing:
    """A command's tracing: its handle (None when a tracer provider was set before the
    command: the spans go there), where the spans go, and for such a provider a
    counter of the budgetmix spans that ended on it (None when it takes no processor)."""

    kind: str
    handle: TracingHandle | None
    where: str
    counter: _EndedCounter | None = None

    def finish(self) -> str:
        """Flush and shut down; one line saying where the spans went and how many."""
        if self.handle is None:
            if self.counter is None:
                return f"{self.where}, set before this command (it exports them; not counted)"
            return (
                f"{self.where}, set before this command ({self.counter.ended:,} budgetmix"
                " spans ended there; it exports them)"
            )
        self.handle.flush()
        self.handle.shutdown()
        if self.kind == "none":
            return "not exported (--trace none)"
        stats = self.handle.stats()
        return f"{self.where} ({stats.exported:,} spans exported, {stats.lost} lost)"


def _otlp_where() -> str:
    url = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if url:
        return f"OTLP {url}"
    base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318")
    return f"OTLP {base.rstrip('/')}/v1/traces"


def start_tracing(kind: str | None, out: Path) -> RunTracing:
    """Tracing for a command writing into ``out``, as ``--trace kind`` says (None:
    ``OTEL_TRACES_EXPORTER``, else ``jsonl``).

    Raises:
        ConfigError: a bad ``OTEL_*`` variable (from :func:`configure_tracing`).
        MissingExtraError: ``otlp`` without the ``otlp`` extra.
    """
    if kind is None:
        kind = env_exporter(TRACES_EXPORTER_ENV, TRACE_CHOICES) or "jsonl"
    preset = trace.get_tracer_provider()
    if not isinstance(preset, trace.ProxyTracerProvider):
        counter: _EndedCounter | None = None
        add = getattr(preset, "add_span_processor", None)
        if callable(add):
            counter = _EndedCounter()
            add(counter)
        return RunTracing(kind, None, f"the {type(preset).__name__}", counter)
    path = out / "traces.jsonl"
    where = {"jsonl": str(path), "console": "stdout", "none": "nowhere"}.get(kind)
    handle = configure_tracing(cast(ExporterName, kind), path=path)
    return RunTracing(kind, handle, where if where is not None else _otlp_where())


def add_trace_argument(parser: Any, default: str | None, *, unset: str = "not traced") -> None:
    """The ``--trace`` flag on ``parser``; ``unset`` says what the command does without it
    when ``default`` is None (the help must say what really happens)."""
    parser.add_argument(
        "--trace",
        choices=TRACE_CHOICES,
        default=default,
        help="where spans go: jsonl (<out>/traces.jsonl), console, otlp (the standard"
        " OTEL_EXPORTER_OTLP_* variables) or none"
        + (f" (default {default})" if default else f" (default: {unset})"),
    )
