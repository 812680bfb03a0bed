"""budgetmix traces in a real Arize Phoenix (``-m backends``): the demo's controller stage
(``budgetmix demo --trace otlp``, content not captured) and the SDK-wrapped episodes of
``examples/traces_in_a_backend.py`` (captured, and again not), exported over OTLP/HTTP
and read back through Phoenix's REST and GraphQL API on 127.0.0.1.

What a person looks for there: every span arrived; kinds agent / LLM / tool; the
ledger's tokens and cost; messages on chat spans and the task and answer on episode
spans exactly when content is captured; failed and exhausted episodes under the ERROR
status filter; one session per conversation."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from _phoenix import ROOT, Phoenix

pytestmark = [pytest.mark.backends, pytest.mark.slow]
pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")
pytest.importorskip("openai")

KINDS = {"invoke_agent": "AGENT", "chat": "LLM", "execute_tool": "TOOL"}
CONTENT_KEYS = ("input.value", "llm.input_messages.", "llm.output_messages.")


def _example() -> ModuleType:
    path = ROOT / "examples" / "traces_in_a_backend.py"
    spec = importlib.util.spec_from_file_location("traces_in_a_backend", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def _demo(phoenix: Phoenix, out: Path) -> tuple[int, str]:
    """The demo's controller stage over OTLP into project ``demo``: (spans it says it
    exported, its stderr)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(
        OTEL_EXPORTER_OTLP_ENDPOINT=phoenix.url,
        OTEL_EXPORTER_OTLP_HEADERS="x-project-name=demo",
        OTEL_EXPORTER_OTLP_TIMEOUT="60",
    )
    cmd = [sys.executable, "-m", "budgetmix.cli", "demo", "--quick", "--stages", "controller"]
    proc = subprocess.run(
        [*cmd, "--out", str(out), "--trace", "otlp"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = re.search(r"\(([\d,]+) spans exported, 0 lost\)", proc.stdout)
    assert found, proc.stdout[-2000:]
    return int(found.group(1).replace(",", "")), proc.stderr


def spans(phoenix: Phoenix, project: str, expected: int, timeout_s: float = 60.0) -> list[Any]:
    """The project's spans, once ``expected`` of them are stored (ingestion is async)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found: list[Any] = []
        cursor = None
        while True:
            params: dict[str, Any] = {"limit": 1000, **({"cursor": cursor} if cursor else {})}
            reply = phoenix.api.get(f"/v1/projects/{project}/spans", params=params)
            if reply.status_code == 404:  # the project appears with its first span
                break
            reply.raise_for_status()
            body = reply.json()
            found += body["data"]
            cursor = body.get("next_cursor")
            if not cursor:
                break
        if len(found) >= expected or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


@pytest.fixture(scope="module")
def run(phoenix: Phoenix, tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    example = _example()
    captured = example.main(phoenix.url, project="sdk-captured", capture_content=True)
    plain = example.main(phoenix.url, project="sdk-plain", capture_content=False, prefix="plain-")
    demo_spans, demo_stderr = _demo(phoenix, tmp_path_factory.mktemp("demo"))
    return SimpleNamespace(
        captured=captured,
        plain=plain,
        demo_spans=demo_spans,
        demo_stderr=demo_stderr,
        stored={
            "sdk-captured": spans(phoenix, "sdk-captured", captured.spans),
            "sdk-plain": spans(phoenix, "sdk-plain", plain.spans),
            "demo": spans(phoenix, "demo", demo_spans),
        },
    )


def _kind(span: dict[str, Any]) -> str:
    return KINDS[span["name"].split(" ")[0]]


def test_every_span_arrived(run: SimpleNamespace) -> None:
    assert len(run.stored["sdk-captured"]) == run.captured.spans == 11
    assert len(run.stored["sdk-plain"]) == run.plain.spans == 11
    assert len(run.stored["demo"]) == run.demo_spans > 50
    # Phoenix has no metrics endpoint (405): one clear line, none of the SDK's
    assert run.demo_stderr.count("refuses metrics (HTTP 405)") == 1
    assert "Failed to export metrics" not in run.demo_stderr


def test_kinds_are_agent_llm_and_tool(run: SimpleNamespace) -> None:
    for project, stored in run.stored.items():
        assert all(s["span_kind"] == _kind(s) for s in stored), project
        assert {s["span_kind"] for s in stored} == {"AGENT", "LLM", "TOOL"}, project


def test_token_counts_and_cost_match_the_ledger(phoenix: Phoenix, run: SimpleNamespace) -> None:
    stored = run.stored["sdk-captured"]
    llm = [s["attributes"] for s in stored if s["span_kind"] == "LLM"]
    used = [r.used for r in run.captured.results]
    assert sum(a["llm.token_count.prompt"] for a in llm) == sum(u["input_tokens"] for u in used)
    assert sum(a["llm.token_count.completion"] for a in llm) == sum(
        u["output_tokens"] for u in used
    )
    (project,) = [p for p in phoenix.api.get("/v1/projects").json()["data"]
                  if p["name"] == "sdk-captured"]  # fmt: skip
    query = (
        "query($id: ID!) { node(id: $id) { ... on Project { costSummary { total { cost } } } } }"
    )
    node: Any = phoenix.graphql(query, id=project["id"])["node"]
    cost = node["costSummary"]["total"]["cost"]
    assert cost == pytest.approx(sum(u["cost_usd"] for u in used), rel=1e-9)
    assert cost > 0


def test_messages_show_when_captured(run: SimpleNamespace) -> None:
    stored = run.stored["sdk-captured"]
    for span in stored:
        attrs = span["attributes"]
        if span["span_kind"] == "LLM":  # read from gen_ai.input/output.messages
            assert attrs["llm.input_messages.0.message.role"] == "user"
            assert attrs["llm.output_messages.0.message.role"] == "assistant"
    agents = {
        s["attributes"]["input.value"]: s["attributes"].get("output.value")
        for s in stored
        if s["span_kind"] == "AGENT"
    }
    assert agents["Has order A-1001 shipped?"] == "It ships today."
    assert agents["When will it arrive?"] == "Tomorrow before noon."
    assert "Where is order A-1002?" in agents  # exhausted: the last reply, a tool call
    reply = "llm.output_messages.0.message.content"
    answered = [s for s in stored if s["attributes"].get(reply) == "It ships today."]
    (second_turn,) = [s for s in answered if s["span_kind"] == "LLM"]
    roles = [v for k, v in second_turn["attributes"].items() if k.endswith(".message.role")]
    assert "tool" in roles  # the tool result went back to the model, and shows


@pytest.mark.parametrize("project", ["sdk-plain", "demo"])
def test_no_content_when_not_captured(run: SimpleNamespace, project: str) -> None:
    for span in run.stored[project]:
        attrs = span["attributes"]
        shown = [k for k in attrs if k.startswith(CONTENT_KEYS)]
        assert not shown, (span["name"], shown)
        # Phoenix fills a chat span's output.value with the response's metadata only
        assert "output.value" not in attrs or set(json.loads(attrs["output.value"])) <= {
            "model", "id", "finish_reasons"
        }, attrs["output.value"]  # fmt: skip


def test_failed_and_exhausted_episodes_are_found_by_status(
    phoenix: Phoenix, run: SimpleNamespace
) -> None:
    reply = phoenix.api.get(
        "/v1/projects/sdk-captured/spans", params={"status_code": "ERROR", "limit": 100}
    )
    reply.raise_for_status()
    errors = reply.json()["data"]
    assert sorted(s["status_message"] for s in errors) == ["budget_exhausted: turns", "failed"]
    assert {s["span_kind"] for s in errors} == {"AGENT"}
    demo = run.stored["demo"]
    agents = [s for s in demo if s["span_kind"] == "AGENT"]
    failed = [s for s in agents if s["attributes"]["budgetmix.status"] != "success"]
    assert failed, "the quick demo has exhausted episodes at T=2"
    assert all(s["status_code"] == "ERROR" for s in failed)
    assert all(s["attributes"]["error.type"] == s["attributes"]["budgetmix.status"] for s in failed)
    assert all(s["status_code"] == "UNSET" for s in agents if s not in failed)


def _sessions(phoenix: Phoenix, project: str) -> dict[str, int]:
    reply = phoenix.api.get(f"/v1/projects/{project}/sessions", params={"limit": 100})
    reply.raise_for_status()
    return {s["session_id"]: len(s["traces"]) for s in reply.json()["data"]}


def test_one_session_per_conversation(phoenix: Phoenix, run: SimpleNamespace) -> None:
    assert _sessions(phoenix, "sdk-captured") == {"conv-1": 2, "conv-2": 1, "conv-3": 1}
    assert _sessions(phoenix, "sdk-plain") == {
        "plain-conv-1": 2,
        "plain-conv-2": 1,
        "plain-conv-3": 1,
    }
    demo = _sessions(phoenix, "demo")
    agents = [s for s in run.stored["demo"] if s["span_kind"] == "AGENT"]
    conversations = Counter(s["attributes"]["gen_ai.conversation.id"] for s in agents)
    assert demo == dict(conversations) and len(demo) == 12
    assert json.dumps(sorted(demo)).count("support-") == 12
