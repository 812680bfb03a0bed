"""``--trace jsonl|console|otlp|none`` on ``budgetmix demo`` and ``budgetmix eval``: the
spans go where it says (OTLP to the collector the standard variables name), the summary
prints their true count, a provider set before the command gets them and is counted,
and the demo's episodes each carry their own ``gen_ai.conversation.id``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from budgetmix.telemetry import OTLPReceiver

pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")

DEMO = [sys.executable, "-m", "budgetmix.cli", "demo", "--quick", "--stages", "controller"]
EVAL = [
    sys.executable, "-m", "budgetmix.cli", "eval", "--env", "faulty_tools", "--tasks", "2",
    "--budgets", "2,4", "-k", "1", "--agent", "noisy", "--noise", "0.3", "--no-progress",
    "--no-plots", "--n-boot", "20",
]  # fmt: skip


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return {**env, "OTEL_SERVICE_NAME": "budgetmix-test", **extra}


def _run(cmd: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _exported(stdout: str) -> int:
    found = re.search(r"\(([\d,]+) spans exported, 0 lost\)", stdout)
    assert found, stdout[-1500:]
    return int(found.group(1).replace(",", ""))


def test_demo_over_otlp_counts_what_arrived(tmp_path: Path) -> None:
    with OTLPReceiver(metrics_status=405) as receiver:
        # a loaded machine must not turn a slow loopback export into lost spans
        env = _env(OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint, OTEL_EXPORTER_OTLP_TIMEOUT="60")
        proc = _run([*DEMO, "--out", str(tmp_path), "--trace", "otlp"], env)
        spans = receiver.spans
        assert f"OTLP {receiver.endpoint}/v1/traces" in proc.stdout
    assert _exported(proc.stdout) == len(spans) > 0
    assert not (tmp_path / "traces.jsonl").exists()
    assert {s["resource"]["service.name"] for s in spans} == {"budgetmix-test"}
    # the backend has no metrics endpoint: one clear line, none of the SDK's
    assert proc.stderr.count("refuses metrics (HTTP 405)") == 1
    assert "Failed to export metrics" not in proc.stderr
    agents = [s for s in spans if s["name"].startswith("invoke_agent")]
    sessions = {s["attributes"]["gen_ai.conversation.id"] for s in agents}
    assert len(sessions) == len(agents) == 12  # 3 budgets x 4 seeds, one session each
    for s in spans:  # the turns and tools of an episode serve its conversation too
        if s["name"].startswith("chat"):
            assert s["attributes"]["gen_ai.conversation.id"] in sessions


def test_demo_jsonl_by_default_and_none_from_the_variable(tmp_path: Path) -> None:
    proc = _run([*DEMO, "--out", str(tmp_path / "a")], _env())
    lines = (tmp_path / "a" / "traces.jsonl").read_text().splitlines()
    assert _exported(proc.stdout) == len(lines) > 0
    proc = _run([*DEMO, "--out", str(tmp_path / "b")], _env(OTEL_TRACES_EXPORTER="none"))
    assert "not exported (--trace none)" in proc.stdout
    assert not (tmp_path / "b" / "traces.jsonl").exists()


def test_eval_trace_jsonl_prints_the_count(tmp_path: Path) -> None:
    proc = _run([*EVAL, "--out", str(tmp_path), "--trace", "jsonl"], _env())
    spans = [json.loads(line) for line in (tmp_path / "traces.jsonl").read_text().splitlines()]
    assert f"traces: {tmp_path / 'traces.jsonl'}" in proc.stdout
    assert _exported(proc.stdout) == len(spans) > 0
    assert any(s["name"].startswith("invoke_agent") for s in spans)
    untraced = _run([*EVAL, "--out", str(tmp_path / "quiet")], _env())
    assert "traces:" not in untraced.stdout  # not traced unless asked


PRESET = """
import sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from budgetmix.cli.demo import demo_main

memory = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(memory))
trace.set_tracer_provider(provider)
code = demo_main(["--quick", "--stages", "controller", "--out", sys.argv[1]])
print("MEMORY", len(memory.get_finished_spans()))
sys.exit(code)
"""


def test_a_provider_set_before_the_demo_gets_the_spans_and_is_counted(tmp_path: Path) -> None:
    proc = _run([sys.executable, "-c", PRESET, str(tmp_path)], _env())
    memory = int(proc.stdout.rsplit("MEMORY ", 1)[1].split()[0])
    assert memory > 0
    assert f"({memory:,} budgetmix spans ended there; it exports them)" in proc.stdout
    assert "0 spans" not in proc.stdout
    assert not (tmp_path / "traces.jsonl").exists()
