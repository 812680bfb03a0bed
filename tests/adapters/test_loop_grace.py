"""The opt-in grace turn at exhaustion: one tool-less call for a best-effort answer."""

from __future__ import annotations

import pytest
from budgetmix import Budget, BudgetController, EpisodeStatus, MistakeKind
from budgetmix.adapters import (
    ScriptedModel,
    final_answer,
    run_agent,
    tool_call,
    tool_calls,
)
from budgetmix.adapters.loop import IGNORED_ON_GRACE
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

pytestmark = pytest.mark.usefixtures("no_network")


def search(query: str) -> str:
    """Search the notes."""
    return f"nothing about {query}"


def _looping_script(turns: int) -> list:  # type: ignore[type-arg]
    return [tool_calls(tool_call("search", {"query": f"q{i}"})) for i in range(turns)]


def test_grace_turn_gives_a_best_effort_answer() -> None:
    model = ScriptedModel([*_looping_script(2), final_answer("probably 42")])
    run = run_agent(model, [search], "find it", Budget(turns=2), exhaustion="grace")
    assert model.calls == 3
    grace = model.requests[-1]
    assert grace.tool_choice == "none"
    assert grace.tool_names == ("search",)  # definitions stay: the prompt cache stays warm
    assert grace.notice is not None and "final turn" in grace.notice
    assert [r.tool_choice for r in model.requests[:-1]] == ["auto", "auto"]
    assert run.status is EpisodeStatus.BUDGET_EXHAUSTED
    assert run.result.grace_turn
    assert run.grace_answer and run.output == "probably 42"
    assert run.result.final_output == "probably 42"  # the best-effort answer is on the result
    assert run.messages[-1].content == "probably 42"
    assert [e.kind for e in run.result.events].count("grace_turn") == 1


def test_grace_turn_tool_calls_are_not_executed() -> None:
    executed: list[str] = []

    def act(name: str) -> str:
        """Do something."""
        executed.append(name)
        return "done"

    script = [
        tool_calls(tool_call("act", {"name": "first"})),
        tool_calls(tool_call("act", {"name": "grace"}, id="g")),
    ]
    model = ScriptedModel(script)
    run = run_agent(model, [act], "go", Budget(turns=1), exhaustion="grace")
    assert executed == ["first"]
    assert [c.id for c in run.ignored_tool_calls] == ["g"]
    assert run.result.mistakes[-1].kind is MistakeKind.MODEL_FORMAT_ERROR
    last = run.messages[-1]
    assert last.role == "tool" and last.tool_call_id == "g" and last.content == IGNORED_ON_GRACE
    assert run.status is EpisodeStatus.BUDGET_EXHAUSTED


def test_grace_turn_is_on_the_trace() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    controller = BudgetController(Budget(turns=1), exhaustion="grace", tracer_provider=provider)
    model = ScriptedModel([*_looping_script(1), final_answer("best effort")])
    run = run_agent(model, [search], "find", controller)
    assert run.result.grace_turn
    chats = [s for s in exporter.get_finished_spans() if s.name.startswith("chat")]
    assert [bool((s.attributes or {}).get("budgetmix.grace_turn")) for s in chats] == [False, True]
    agent = next(s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent"))
    assert "budgetmix.budget.grace_turn" in [e.name for e in agent.events]


def test_without_grace_there_is_no_extra_call() -> None:
    model = ScriptedModel([*_looping_script(2), final_answer("unused")])
    run = run_agent(model, [search], "find", Budget(turns=2))
    assert model.calls == 2
    assert not run.result.grace_turn and run.output is None
