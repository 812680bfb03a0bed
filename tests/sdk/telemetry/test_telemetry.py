"""configure_tracing, the JSONL exporter, redaction and the loopback OTLP receiver.

The global tracer provider can be set once per process, so every test here uses
``set_global=False`` and tracers from ``handle.provider``; the global path runs in a
subprocess.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest
from budgetmix.exceptions import ConfigError, MissingExtraError
from budgetmix.telemetry import (
    DEFAULT_MAX_QUEUE_SIZE,
    REDACTED,
    CountingBatchSpanProcessor,
    OTLPReceiver,
    TracingHandle,
    configure_tracing,
    read_jsonl_spans,
    redact_attributes,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

BURST = 10_000
OPENAI_KEY = "sk-proj-abcDEF1234567890ghijklmnop"
ANTHROPIC_KEY = "sk-ant-api03-ZYXWVUTSRQ0987654321-abcdef"
BEARER = "Bearer eyJhbGciOiJIUzI1NiJ9.payload.signature"
SECRETS = (OPENAI_KEY, ANTHROPIC_KEY, "eyJhbGciOiJIUzI1NiJ9", "hunter2-password")


def _emit_sample(handle: TracingHandle) -> None:
    tracer = handle.provider.get_tracer("tests.telemetry", "1.2")
    with tracer.start_as_current_span(
        "invoke_agent solver",
        attributes={"gen_ai.agent.name": "solver", "budgetmix.turns": 3, "ratio": 0.5},
    ) as parent:
        with tracer.start_as_current_span(
            "chat m1",
            kind=SpanKind.CLIENT,
            attributes={"gen_ai.request.model": "m1", "tags": ("a", "b"), "ok": True},
        ) as child:
            child.add_event("budgetmix.notice", {"budgetmix.remaining": 2, "text": "2 left"})
            child.set_status(Status(StatusCode.ERROR, "boom"))
        parent.set_attribute("gen_ai.usage.input_tokens", 42)


def _emit_secrets(handle: TracingHandle) -> None:
    tracer = handle.provider.get_tracer("tests.telemetry")
    with tracer.start_as_current_span("chat secrets") as span:
        span.set_attribute("http.request.header.authorization", BEARER)
        span.set_attribute("note", f"the model saw key {OPENAI_KEY} in a prompt")
        span.set_attribute("headers", ("Accept: */*", f"Authorization: {BEARER}"))
        span.set_attribute("db.password", "hunter2-password")
        span.set_attribute("gen_ai.usage.input_tokens", 7)
        span.add_event("retry", {"api_key": ANTHROPIC_KEY, "x-api-key": "opaque-value-1"})
        span.record_exception(ValueError(f"invalid x-api-key {ANTHROPIC_KEY}"))
        span.set_status(Status(StatusCode.ERROR, f"401 for {OPENAI_KEY}"))


def _assert_no_secret(data: bytes) -> None:
    for secret in (*SECRETS, "opaque-value-1"):
        assert secret.encode() not in data


# ---------------------------------------------------------------- JSONL


def test_jsonl_round_trip(tmp_path: Path, handles: list[TracingHandle]) -> None:
    path = tmp_path / "deep" / "traces.jsonl"
    handle = configure_tracing("jsonl", path=path, service_name="svc", set_global=False)
    handles.append(handle)
    _emit_sample(handle)
    assert handle.flush(5)

    child, parent = read_jsonl_spans(path)  # children end first
    assert parent["name"] == "invoke_agent solver"
    assert parent["parent_span_id"] is None
    assert child["parent_span_id"] == parent["span_id"]
    assert child["trace_id"] == parent["trace_id"]
    assert len(parent["trace_id"]) == 32 and len(parent["span_id"]) == 16
    int(parent["trace_id"], 16)
    assert parent["kind"] == "INTERNAL" and child["kind"] == "CLIENT"
    assert parent["attributes"] == {
        "gen_ai.agent.name": "solver",
        "budgetmix.turns": 3,
        "ratio": 0.5,
        "gen_ai.usage.input_tokens": 42,
    }
    assert child["attributes"] == {"gen_ai.request.model": "m1", "tags": ["a", "b"], "ok": True}
    assert child["status"] == {"code": "ERROR", "description": "boom"}
    assert parent["status"]["code"] == "UNSET"
    (event,) = child["events"]
    assert event["name"] == "budgetmix.notice"
    assert event["attributes"] == {"budgetmix.remaining": 2, "text": "2 left"}
    assert child["start_ns"] <= event["time_ns"] <= child["end_ns"]
    assert parent["start_ns"] <= child["start_ns"] <= child["end_ns"] <= parent["end_ns"]
    assert parent["resource"]["service.name"] == "svc"
    assert parent["scope"] == {"name": "tests.telemetry", "version": "1.2"}

    # A second handle appends to the same file.
    handle.shutdown()
    again = configure_tracing("jsonl", path=path, set_global=False)
    handles.append(again)
    _emit_sample(again)
    again.flush(5)
    assert len(read_jsonl_spans(path)) == 4


def test_read_jsonl_spans_names_the_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"name": "a"}\n\n{"name": \n')
    with pytest.raises(ConfigError, match=r"t\.jsonl:3"):
        read_jsonl_spans(path)


@pytest.mark.slow
def test_burst_of_10k_spans_is_not_dropped_by_default(
    tmp_path: Path, handles: list[TracingHandle]
) -> None:
    path = tmp_path / "burst.jsonl"
    handle = configure_tracing("jsonl", path=path, set_global=False)
    handles.append(handle)
    tracer = handle.provider.get_tracer("burst")
    for i in range(BURST):
        with tracer.start_as_current_span("execute_tool t", attributes={"i": i}):
            pass
    assert handle.flush(30)
    lines = path.read_bytes().count(b"\n")
    assert lines == BURST
    assert sorted(s["attributes"]["i"] for s in read_jsonl_spans(path)) == list(range(BURST))
    stats = handle.stats()
    assert (stats.ended, stats.exported, stats.lost) == (BURST, BURST, 0)


class _GatedExporter(InMemorySpanExporter):
    """Blocks every export until released: an exporter that fell behind, deterministically."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.gate.wait(30)
        return super().export(spans)


def _burst_through(processor: BatchSpanProcessor, exporter: _GatedExporter) -> int:
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("burst")
    for _ in range(BURST):
        with tracer.start_as_current_span("s"):
            pass
    exporter.gate.set()
    provider.force_flush(30_000)
    provider.shutdown()
    return len(exporter.get_finished_spans())


@pytest.mark.slow
def test_sdk_default_queue_drops_a_burst_ours_keeps(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("OTEL_BSP_MAX_QUEUE_SIZE", raising=False)
    caplog.set_level(logging.ERROR)  # the SDK logs one "Queue full" warning per dropped span

    sdk_default = _GatedExporter()
    kept_by_default = _burst_through(BatchSpanProcessor(sdk_default), sdk_default)
    # 2048 queued plus at most one 512-span batch in the stalled exporter.
    assert kept_by_default <= 2048 + 512

    ours = _GatedExporter()
    processor = CountingBatchSpanProcessor(ours)
    assert _burst_through(processor, ours) == BURST
    assert processor.stats().lost == 0
    assert DEFAULT_MAX_QUEUE_SIZE >= BURST

    # With a queue too small, the loss is counted rather than silent.
    small = _GatedExporter()
    counting_small = CountingBatchSpanProcessor(small, max_queue_size=2048)
    kept = _burst_through(counting_small, small)
    stats = counting_small.stats()
    assert stats.ended == BURST and stats.exported == kept and stats.lost == BURST - kept > 0


# ---------------------------------------------------------------- redaction


def test_redact_attributes_masks_credentials_only() -> None:
    redacted = redact_attributes(
        {
            "http.request.header.authorization": "Basic dXNlcjpwYXNz",
            "api_key": "anything",
            "x-api-key": "anything",
            "client_secret": "s3",
            "msg": f"use {OPENAI_KEY} or {BEARER}",
            "list": ("plain", ANTHROPIC_KEY),
            "gen_ai.usage.input_tokens": 12,
            "gen_ai.usage.output_tokens": 3,
            "max_tokens": 100,
            "text": "ask-me and sk-learn stay",
        }
    )
    assert redacted["http.request.header.authorization"] == REDACTED
    assert redacted["api_key"] == redacted["x-api-key"] == redacted["client_secret"] == REDACTED
    assert redacted["msg"] == f"use {REDACTED} or {REDACTED}"
    assert redacted["list"] == ("plain", REDACTED)
    assert redacted["gen_ai.usage.input_tokens"] == 12
    assert redacted["gen_ai.usage.output_tokens"] == 3
    assert redacted["max_tokens"] == 100
    assert redacted["text"] == "ask-me and sk-learn stay"


def test_secrets_never_reach_the_jsonl_file(tmp_path: Path, handles: list[TracingHandle]) -> None:
    path = tmp_path / "t.jsonl"
    handle = configure_tracing("jsonl", path=path, set_global=False)
    handles.append(handle)
    _emit_secrets(handle)
    handle.flush(5)
    _assert_no_secret(path.read_bytes())
    (span,) = read_jsonl_spans(path)
    assert span["attributes"]["http.request.header.authorization"] == REDACTED
    assert span["attributes"]["db.password"] == REDACTED
    assert span["attributes"]["gen_ai.usage.input_tokens"] == 7
    assert span["events"][0]["attributes"]["api_key"] == REDACTED
    assert REDACTED in span["status"]["description"]


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_otlp_export_to_loopback_receiver_redacted(
    receiver: OTLPReceiver,
    handles: list[TracingHandle],
    monkeypatch: pytest.MonkeyPatch,
    compression: str,
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", compression)
    handle = configure_tracing(
        "otlp", endpoint=receiver.endpoint, headers={"X-Tenant": "t1"}, set_global=False
    )
    handles.append(handle)
    _emit_sample(handle)
    _emit_secrets(handle)
    assert handle.flush(10)
    assert receiver.wait_for_spans(3, timeout_s=10)

    by_name = {s["name"]: s for s in receiver.spans}
    child, parent = by_name["chat m1"], by_name["invoke_agent solver"]
    assert child["parent_span_id"] == parent["span_id"] and len(parent["trace_id"]) == 32
    assert child["kind"] == "CLIENT" and child["status"] == {"code": "ERROR", "description": "boom"}
    assert child["attributes"]["tags"] == ["a", "b"]
    assert parent["attributes"]["gen_ai.usage.input_tokens"] == 42
    assert child["events"][0]["attributes"] == {"budgetmix.remaining": 2, "text": "2 left"}
    assert parent["resource"]["service.name"] == "budgetmix"

    traces = [r for r in receiver.requests if r.path == "/v1/traces"]
    assert traces and all(r.headers["x-tenant"] == "t1" for r in traces)
    assert all(r.headers["content-type"] == "application/x-protobuf" for r in traces)
    if compression == "gzip":
        assert all(r.headers.get("content-encoding") == "gzip" for r in traces)
    for request in traces:
        _assert_no_secret(request.raw_body)
        _assert_no_secret(request.body)
    secret_span = next(s for s in receiver.spans if "db.password" in s["attributes"])
    assert secret_span["attributes"]["http.request.header.authorization"] == REDACTED
    assert secret_span["events"][0]["attributes"]["x-api-key"] == REDACTED


def test_otlp_endpoint_and_headers_from_env(
    receiver: OTLPReceiver, handles: list[TracingHandle], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-from-env=yes")
    handle = configure_tracing("otlp", set_global=False)
    handles.append(handle)
    assert handle.meter_provider is not None
    handle.meter_provider.get_meter("t").create_counter("budgetmix.turns").add(2)
    _emit_sample(handle)
    assert handle.flush(10)
    assert receiver.wait_for_spans(2, timeout_s=10)
    paths = {r.path for r in receiver.requests}
    assert paths == {"/v1/traces", "/v1/metrics"}
    assert all(r.headers["x-from-env"] == "yes" for r in receiver.requests)


def test_otlp_full_traces_url(receiver: OTLPReceiver, handles: list[TracingHandle]) -> None:
    handle = configure_tracing("otlp", endpoint=receiver.traces_endpoint, set_global=False)
    handles.append(handle)
    _emit_sample(handle)
    handle.flush(10)
    assert receiver.wait_for_spans(2, timeout_s=10)


def test_receiver_rejects_unknown_paths_and_bad_bodies(receiver: OTLPReceiver) -> None:
    assert httpx.post(receiver.endpoint + "/v2/x", content=b"").status_code == 404
    bad = httpx.post(receiver.traces_endpoint, content=b"\xff\xff\xff")
    assert bad.status_code == 400
    assert receiver.spans == [] and receiver.requests == []


# ---------------------------------------------------------------- configuration


def test_none_exporter_and_console(handles: list[TracingHandle]) -> None:
    handle = configure_tracing("none", set_global=False)
    handles.append(handle)
    with handle.provider.get_tracer("t").start_as_current_span("s") as span:
        assert span.get_span_context().is_valid
    assert handle.processor is None and handle.flush(1)

    console = configure_tracing("console", set_global=False)
    handles.append(console)
    assert console.meter_provider is not None and console.processor is not None


def test_configuration_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="exporter"):
        configure_tracing("zipkin", set_global=False)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="endpoint"):
        configure_tracing("jsonl", path=tmp_path / "t", endpoint="http://x", set_global=False)
    with pytest.raises(ConfigError, match="max_export_batch_size"):
        configure_tracing("none", max_queue_size=10, max_export_batch_size=11, set_global=False)
    with pytest.raises(ConfigError, match="endpoint"):
        configure_tracing("otlp", endpoint="localhost:4318", set_global=False)
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match="path"):
        configure_tracing("jsonl", path=blocker / "t.jsonl", set_global=False)


def test_missing_otlp_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    with pytest.raises(MissingExtraError) as info:
        configure_tracing("otlp", set_global=False)
    assert info.value.extra == "otlp"
    assert info.value.package == "opentelemetry-exporter-otlp-proto-http"


_GLOBAL_SCRIPT = """
import sys, warnings
from opentelemetry import trace
from budgetmix.telemetry import configure_tracing

handle = configure_tracing("jsonl", path=sys.argv[1])
assert handle.is_global and trace.get_tracer_provider() is handle.provider
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    second = configure_tracing("none")
assert not second.is_global and caught[0].category is RuntimeWarning
tracer = trace.get_tracer("library")
for i in range(100):
    with tracer.start_as_current_span("s", attributes={"i": i}):
        pass
# No flush: the atexit hook must export what is queued.
"""


def test_global_provider_and_atexit_flush(tmp_path: Path) -> None:
    path = tmp_path / "global.jsonl"
    subprocess.run(
        [sys.executable, "-c", _GLOBAL_SCRIPT, str(path)], check=True, capture_output=True
    )
    spans = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(spans) == 100 and spans[0]["scope"]["name"] == "library"


_LATE_PROVIDER_SCRIPT = """
import sys
from budgetmix import Budget, BudgetController
from budgetmix.telemetry import configure_tracing

controller = BudgetController(Budget(turns=4))  # global tracer, no SDK provider yet
assert controller.tracer_is_no_op()
with controller.episode() as ep:  # nothing can record: turns and tools skip span work
    with ep.begin_turn(model="m"), ep.tool_call("t"):
        pass
    ep.finish(True)
handle = configure_tracing("jsonl", path=sys.argv[1])
assert not controller.tracer_is_no_op()
with controller.episode() as ep:
    with ep.begin_turn(model="m"), ep.tool_call("t", "c1"):
        pass
    ep.finish(True)
handle.shutdown()
"""


def test_a_provider_installed_later_records_the_next_episodes_spans(tmp_path: Path) -> None:
    path = tmp_path / "late.jsonl"
    subprocess.run(
        [sys.executable, "-c", _LATE_PROVIDER_SCRIPT, str(path)], check=True, capture_output=True
    )
    spans = read_jsonl_spans(path)
    names = sorted(s["name"] for s in spans)
    assert names == ["chat m", "execute_tool t", "invoke_agent agent"]
    by_name = {s["name"]: s for s in spans}
    root = by_name["invoke_agent agent"]
    assert by_name["chat m"]["parent_span_id"] == root["span_id"]
    assert by_name["execute_tool t"]["parent_span_id"] == by_name["chat m"]["span_id"]
