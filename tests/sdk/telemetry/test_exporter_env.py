"""OTEL_TRACES_EXPORTER / OTEL_METRICS_EXPORTER choose the exporters when the call does not,
and an OTLP endpoint that refuses metrics (405, as Arize Phoenix answers) is reported in
one line, once, while the spans still arrive."""

from __future__ import annotations

import logging
from typing import Any, ClassVar

import pytest
from budgetmix import Budget, BudgetController, ConfigError
from budgetmix.telemetry import OTLPReceiver, configure_tracing
from budgetmix.telemetry.exporters import OnceMetricExporter

pytest.importorskip("opentelemetry.exporter.otlp.proto.http.metric_exporter")


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, otlp_env: None) -> pytest.MonkeyPatch:
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_traces_exporter_variable_replaces_the_default(
    clean_env: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    clean_env.setenv("OTEL_TRACES_EXPORTER", "none")
    handle = configure_tracing(set_global=False)
    assert handle.processor is None and handle.meter_provider is None
    handle.shutdown()
    clean_env.setenv("OTEL_TRACES_EXPORTER", "Console")
    handle = configure_tracing(set_global=False)
    assert handle.meter_provider is not None  # console metrics come with console spans
    handle.shutdown()
    # an explicit argument wins over the variable
    handle = configure_tracing("jsonl", path=tmp_path / "t.jsonl", set_global=False)
    assert handle.meter_provider is None  # jsonl spans bring no metrics
    handle.shutdown()


@pytest.mark.parametrize(
    ("variable", "value"),
    [("OTEL_TRACES_EXPORTER", "zipkin"), ("OTEL_METRICS_EXPORTER", "otlp,console")],
)
def test_an_unknown_exporter_is_a_config_error_naming_the_variable(
    clean_env: pytest.MonkeyPatch, variable: str, value: str, tmp_path: Any
) -> None:
    clean_env.setenv(variable, value)
    with pytest.raises(ConfigError, match=variable):
        configure_tracing(path=tmp_path / "t.jsonl", set_global=False)


def test_metrics_none_leaves_otlp_spans_alone(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("OTEL_METRICS_EXPORTER", "none")
    with OTLPReceiver() as receiver:
        handle = configure_tracing("otlp", endpoint=receiver.endpoint, set_global=False)
        assert handle.meter_provider is None
        handle.shutdown()


def test_metrics_can_go_to_otlp_beside_jsonl_spans(
    clean_env: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    with OTLPReceiver() as receiver:
        handle = configure_tracing(
            "jsonl", path=tmp_path / "t.jsonl", metrics="otlp", endpoint=receiver.endpoint,
            set_global=False,
        )  # fmt: skip
        assert handle.meter_provider is not None
        handle.shutdown()


def _episodes(handle: Any, n: int) -> None:
    c = BudgetController(
        Budget(turns=1), tracer_provider=handle.provider, meter_provider=handle.meter_provider
    )
    for _ in range(n):
        with c.episode() as ep:
            ep.begin_turn()
            ep.finish(success=True)


def test_a_refusing_metrics_endpoint_is_reported_once(
    clean_env: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with OTLPReceiver(metrics_status=405) as receiver:
        handle = configure_tracing("otlp", endpoint=receiver.endpoint, set_global=False)
        for _ in range(3):  # three metric exports, as a longer run's periodic ones
            _episodes(handle, 2)
            handle.flush(10.0)
        handle.shutdown()
        assert receiver.wait_for_spans(12)
        assert len(receiver.spans) == 12  # six episodes, two spans each: all arrived
    lines = [r.getMessage() for r in caplog.records]
    refusals = [line for line in lines if "refuses metrics" in line]
    assert len(refusals) == 1, lines
    assert "HTTP 405" in refusals[0] and "/v1/metrics" in refusals[0]
    assert "OTEL_METRICS_EXPORTER=none" in refusals[0]
    assert not [line for line in lines if "Failed to export metrics" in line]
    assert receiver.refused == 1  # nothing more was sent there


def test_other_metric_failures_are_logged_once_each(caplog: pytest.LogCaptureFixture) -> None:
    class Failing:
        _preferred_temporality: ClassVar[dict[Any, Any]] = {}
        _preferred_aggregation: ClassVar[dict[Any, Any]] = {}

        def export(self, *args: Any, **kwargs: Any) -> Any:
            logging.getLogger("opentelemetry.exporter.otlp.proto.http.metric_exporter").error(
                "Failed to export %s batch code: %s, reason: %s", "metrics", 503, "busy"
            )
            from opentelemetry.sdk.metrics.export import MetricExportResult

            return MetricExportResult.FAILURE

    exporter = OnceMetricExporter(Failing(), "http://127.0.0.1:9/v1/metrics")
    for _ in range(3):
        exporter.export(None)  # type: ignore[arg-type]
    lines = [r.getMessage() for r in caplog.records]
    assert sum("metrics export to" in line and "HTTP 503" in line for line in lines) == 1
    assert exporter.refused is None  # a 503 may pass: exports go on
    assert not [line for line in lines if "Failed to export" in line]
