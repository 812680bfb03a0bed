"""Shared doubles for the core SDK tests: a fake clock and in-memory OpenTelemetry."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from _sdk_doubles import FakeClock
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


@dataclass
class Otel:
    """A private tracer and meter provider, never installed globally."""

    exporter: InMemorySpanExporter
    tracer_provider: TracerProvider
    reader: InMemoryMetricReader
    meter_provider: MeterProvider

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def span(self, name: str) -> ReadableSpan:
        found = [s for s in self.spans() if s.name == name]
        assert len(found) == 1, (name, [s.name for s in self.spans()])
        return found[0]

    def metrics(self) -> dict[str, list[object]]:
        """Metric name -> its data points."""
        out: dict[str, list[object]] = {}
        data = self.reader.get_metrics_data()
        if data is None:
            return out
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    out.setdefault(m.name, []).extend(m.data.data_points)
        return out


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def otel() -> Iterator[Otel]:
    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    mp = MeterProvider(metric_readers=[reader])
    yield Otel(exporter, tp, reader, mp)
    tp.shutdown()
    mp.shutdown()
