"""Each provider example runs end to end against the scripted fake server (the
environment is cleared of API keys and endpoints, so nothing can leave the machine)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from budgetmix import EpisodeStatus

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ENV = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "BUDGETMIX_MODEL",
)


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV:
        monkeypatch.delenv(name, raising=False)


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_openai_chat_loop(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("openai")
    result = load("openai_chat_loop").main()
    assert result.status is EpisodeStatus.SUCCESS and result.turns_used == 2
    assert result.final_output == "19 + 23 = 42" and result.used["tool_calls"] == 1
    assert "fake server" in capsys.readouterr().out


def test_openai_responses_loop() -> None:
    pytest.importorskip("openai")
    result = load("openai_responses_loop").main()
    assert result.status is EpisodeStatus.SUCCESS and result.final_output == "It has 6 words."
    assert result.used["input_tokens"] > 0  # read from the stream's response.completed


def test_anthropic_loop() -> None:
    pytest.importorskip("anthropic")
    result = load("anthropic_loop").main()
    assert result.status is EpisodeStatus.SUCCESS and result.turns_used == 3
    assert [str(m.kind) for m in result.mistakes] == ["tool_error"]
    assert len(result.recoveries) == 1


@pytest.mark.frameworks
def test_any_framework_via_httpx(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("agents")
    result = load("any_framework_via_httpx").main()
    assert result.status is EpisodeStatus.BUDGET_EXHAUSTED and result.turns_used == 2
    assert "budget exhausted on turns" in capsys.readouterr().out


def test_export_traces_otlp() -> None:
    pytest.importorskip("opentelemetry.proto")
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    spans: list[dict[str, Any]] = load("export_traces_otlp").main()
    names = [s["name"] for s in spans]
    assert names.count("chat gpt-4o-mini") == 3 and "invoke_agent squarer" in names
    events = [e["name"] for s in spans for e in s.get("events", [])]
    assert events.count("budgetmix.mistake") == 1 and events.count("budgetmix.recovery") == 1
