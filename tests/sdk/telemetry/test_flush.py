"""``flush`` honours its timeout and says what it lost; exit warns once with the count.

The dead collector is a loopback port that was just closed: every OTLP request is
refused, and the exporter would retry it with back-off for ~7 s per batch. No test
asserts a duration tighter than ten times the timeout it passed.
"""

from __future__ import annotations

import logging
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

import pytest
from budgetmix.exceptions import ConfigError
from budgetmix.telemetry import CountingBatchSpanProcessor, TracingHandle, configure_tracing
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

SPANS = 25
TIMEOUT_S = 0.5
# Loose on purpose: ten times the timeout, far above what a slow machine adds.
BOUND_S = 10 * TIMEOUT_S


def _dead_endpoint() -> str:
    """A loopback URL where nothing listens (the port was bound, then closed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def _emit(provider: TracerProvider, n: int = SPANS) -> None:
    tracer = provider.get_tracer("tests.flush")
    for i in range(n):
        with tracer.start_as_current_span("s", attributes={"i": i}):
            pass


def _budgetmix_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("budgetmix") and r.levelno >= logging.WARNING
    ]


def test_flush_to_a_dead_collector_returns_false_within_its_timeout(
    otlp_env: None, handles: list[TracingHandle], caplog: pytest.LogCaptureFixture
) -> None:
    handle = configure_tracing("otlp", endpoint=_dead_endpoint(), set_global=False)
    handles.append(handle)
    _emit(handle.provider)
    caplog.set_level(logging.WARNING, logger="budgetmix")

    started = time.monotonic()
    ok = handle.flush(timeout_s=TIMEOUT_S)
    elapsed = time.monotonic() - started

    assert ok is False
    assert elapsed < BOUND_S
    stats = handle.stats()
    assert (stats.ended, stats.exported, stats.lost) == (SPANS, 0, SPANS)
    (warning,) = _budgetmix_warnings(caplog)
    assert f"{SPANS} of {SPANS}" in warning and "not exported" in warning

    # Shutting down is bounded too, and gives the final count once.
    caplog.clear()
    started = time.monotonic()
    handle.shutdown(timeout_s=TIMEOUT_S)
    assert time.monotonic() - started < BOUND_S
    stats = handle.stats()
    assert (stats.exported, stats.lost) == (0, SPANS)
    (warning,) = _budgetmix_warnings(caplog)
    assert f"{SPANS} of {SPANS} spans were never exported" in warning


class _FailingExporter(InMemorySpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.FAILURE


class _StalledExporter(InMemorySpanExporter):
    """Holds every export until released: an exporter that fell behind, deterministically."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.release.wait(30)
        return super().export(spans)


def _provider(processor: CountingBatchSpanProcessor) -> TracerProvider:
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(processor)
    return provider


def test_force_flush_reports_a_failed_export() -> None:
    processor = CountingBatchSpanProcessor(_FailingExporter())
    provider = _provider(processor)
    _emit(provider)
    assert processor.force_flush(10_000) is False
    stats = processor.stats()
    assert (stats.ended, stats.exported, stats.failed, stats.lost) == (SPANS, 0, SPANS, SPANS)
    provider.shutdown()


def test_force_flush_times_out_on_a_stalled_exporter_then_completes() -> None:
    exporter = _StalledExporter()
    processor = CountingBatchSpanProcessor(exporter)
    provider = _provider(processor)
    _emit(provider)

    started = time.monotonic()
    assert processor.force_flush(int(TIMEOUT_S * 1000)) is False
    assert time.monotonic() - started < BOUND_S
    assert processor.stats().exported == 0

    exporter.release.set()
    assert processor.force_flush(10_000) is True
    stats = processor.stats()
    assert (stats.exported, stats.lost) == (SPANS, 0)
    assert len(exporter.get_finished_spans()) == SPANS
    provider.shutdown()


def test_repeated_flushes_against_a_stalled_exporter_do_not_pile_up() -> None:
    exporter = _StalledExporter()
    processor = CountingBatchSpanProcessor(exporter)
    provider = _provider(processor)
    _emit(provider)
    before = threading.active_count()
    for _ in range(20):
        assert processor.force_flush(10) is False
    assert threading.active_count() <= before + 1
    exporter.release.set()
    assert processor.force_flush(10_000) is True
    assert processor.stats().lost == 0
    provider.shutdown()


@pytest.mark.parametrize("bad", [-1, 0, float("nan"), float("inf"), "5", True, 10**400])
def test_flush_and_shutdown_refuse_a_bad_timeout(bad: object, handles: list[TracingHandle]) -> None:
    handle = configure_tracing("none", set_global=False)
    handles.append(handle)
    with pytest.raises(ConfigError, match="timeout_s"):
        handle.flush(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="timeout_s"):
        handle.shutdown(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="shutdown_timeout_s"):
        configure_tracing("none", shutdown_timeout_s=bad, set_global=False)  # type: ignore[arg-type]


def test_a_healthy_flush_and_shutdown_warn_about_nothing(
    tmp_path: object, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="budgetmix")
    handle = configure_tracing("jsonl", path=f"{tmp_path}/t.jsonl", set_global=False)
    _emit(handle.provider)
    assert handle.flush(10) is True
    handle.shutdown()
    assert handle.stats().lost == 0
    assert _budgetmix_warnings(caplog) == []


_EXIT_SCRIPT = """
import sys
from budgetmix.telemetry import configure_tracing

handle = configure_tracing("otlp", endpoint=sys.argv[1], shutdown_timeout_s=0.5)
tracer = handle.provider.get_tracer("exit")
for i in range(int(sys.argv[2])):
    with tracer.start_as_current_span("s"):
        pass
# No flush, no shutdown: the atexit hook must try, give up in time and say so once.
"""


def test_at_exit_one_warning_gives_the_count(otlp_env: None) -> None:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", _EXIT_SCRIPT, _dead_endpoint(), str(SPANS)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    ours = [line for line in done.stderr.splitlines() if line.startswith("budgetmix:")]
    assert len(ours) == 1, done.stderr
    assert re.search(rf"\b{SPANS} of {SPANS} spans were never exported\b", ours[0])
    assert elapsed < 60  # the exporter alone would retry each batch for ~7 s


def test_shutdown_ends_the_helper_threads(tmp_path: object) -> None:
    def helpers() -> list[str]:
        return [t.name for t in threading.enumerate() if t.name.startswith("budgetmix-")]

    before = helpers()
    handle = configure_tracing("console", set_global=False)
    assert len(helpers()) == len(before) + 2  # the span flush and the metrics runners
    handle.shutdown()
    deadline = time.monotonic() + 10
    while len(helpers()) > len(before) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert helpers() == before
    assert handle.flush(1) is False  # after shutdown: refused at once, not hung
