"""Traces that nest and explain (issue 31): the episode's, a model call's and a tool
call's span are current while they run, so spans made meanwhile nest under them; a
failed tool span carries its error text, an exception event and its arguments; one
attribute keeps one type; the metrics have the GenAI client instruments, small-integer
turn buckets, the agent's name and the outcome."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from budgetmix import Budget, BudgetController
from budgetmix.telemetry.redaction import REDACTED
from opentelemetry import trace
from opentelemetry.trace import StatusCode

SECRET = "sk-proj-" + "A1b2C3d4E5f6G7h8"


def _controller(otel: Any, **kw: Any) -> BudgetController:
    return BudgetController(
        kw.pop("budget", Budget(turns=4)),
        tracer_provider=otel.tracer_provider,
        meter_provider=otel.meter_provider,
        **kw,
    )


def test_the_episode_span_is_current_and_user_spans_nest_under_it(otel: Any) -> None:
    controller = _controller(otel)
    mine = otel.tracer_provider.get_tracer("user")
    with controller.episode(name="solve") as ep, mine.start_as_current_span("plan"):
        ep.begin_turn()
    assert not trace.get_current_span().get_span_context().is_valid  # restored after
    episode, plan = otel.span("invoke_agent solve"), otel.span("plan")
    assert plan.parent is not None and plan.parent.span_id == episode.context.span_id


async def test_an_async_episode_is_current_in_its_task(otel: Any) -> None:
    controller = _controller(otel)
    mine = otel.tracer_provider.get_tracer("user")
    async with controller.episode(name="solve"):
        with mine.start_as_current_span("plan"):
            pass
    episode, plan = otel.span("invoke_agent solve"), otel.span("plan")
    assert plan.parent is not None and plan.parent.span_id == episode.context.span_id


def test_a_model_call_and_a_tool_call_are_current_while_they_run(otel: Any) -> None:
    controller = _controller(otel)
    mine = otel.tracer_provider.get_tracer("user")

    def request() -> str:
        with mine.start_as_current_span("http POST"):
            return "reply"

    def tool(city: str) -> str:
        with mine.start_as_current_span("db query"):
            return city.upper()

    with controller.episode() as ep:
        turn = ep.begin_turn(model="m")
        assert turn.call(request) == "reply"
        (call,) = ep.tool_batch(["lookup"])
        assert call.run(tool, city="paris") == "PARIS"
    chat, run = otel.span("chat m"), otel.span("execute_tool lookup")
    http, query = otel.span("http POST"), otel.span("db query")
    assert http.parent is not None and http.parent.span_id == chat.context.span_id
    assert query.parent is not None and query.parent.span_id == run.context.span_id


def _fails(city: str, retries: int = 1) -> str:
    raise ValueError(f"no such city {city!r} (key {SECRET})")


def test_a_failed_tool_span_explains_itself_on_the_call_run_path(otel: Any) -> None:
    controller = _controller(otel, capture_content=True)
    with controller.episode() as ep:
        ep.begin_turn()
        (call,) = ep.tool_batch(["lookup"], ["call-1"])
        with pytest.raises(ValueError, match="no such city"):
            call.run(_fails, "Paris", retries=2)
    span = otel.span("execute_tool lookup")
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description is not None
    assert "ValueError: no such city 'Paris'" in span.status.description
    assert SECRET not in span.status.description and REDACTED in span.status.description
    (event,) = [e for e in span.events if e.name == "exception"]
    assert event.attributes is not None
    assert event.attributes["exception.type"] == "ValueError"
    assert "no such city" in str(event.attributes["exception.message"])
    assert "exception.stacktrace" not in event.attributes  # source lines may hold secrets
    assert SECRET not in json.dumps(dict(event.attributes))
    args = json.loads(str(span.attributes["gen_ai.tool.call.arguments"]))  # type: ignore[index]
    assert args == {"city": "Paris", "retries": 2}


def test_a_failure_recorded_by_hand_explains_itself_too(otel: Any) -> None:
    controller = _controller(otel)
    with controller.episode() as ep:
        ep.begin_turn()
        (call,) = ep.tool_batch(["lookup"])
        call.record_arguments({"city": "Paris"})  # content off: not on the span
        call.fail("the server answered 503")
    span = otel.span("execute_tool lookup")
    assert span.status.description == "the server answered 503"
    (event,) = [e for e in span.events if e.name == "exception"]
    assert event.attributes is not None and event.attributes["exception.type"] == "tool_error"
    assert "gen_ai.tool.call.arguments" not in (span.attributes or {})


def test_every_budget_attribute_keeps_one_type(otel: Any) -> None:
    controller = _controller(otel, budget=Budget(turns=2, cost_usd=1))
    for _ in range(2):
        with controller.episode(name="spent") as ep:
            for turn in ep.turns():
                turn.usage(cost_usd=0.25)
    for span in otel.spans():
        if not span.name.startswith("invoke_agent"):
            continue
        a = span.attributes or {}
        assert a["budgetmix.budget.turns.remaining"] == 0
        assert type(a["budgetmix.budget.turns.remaining"]) is int
        assert type(a["budgetmix.budget.turns.limit"]) is int
        assert type(a["budgetmix.budget.turns.used"]) is int
        assert type(a["budgetmix.budget.cost_usd.limit"]) is float
        assert type(a["budgetmix.budget.cost_usd.remaining"]) is float


def _metric(otel: Any, name: str) -> Any:
    data = otel.reader.get_metrics_data()
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name == name:
                    return m
    raise AssertionError(f"no metric {name}")


def test_the_metrics_are_the_conventions_and_carry_agent_and_outcome(otel: Any) -> None:
    controller = _controller(otel, name="triage", provider_name="openai")
    with controller.episode() as ep:
        turn = ep.begin_turn(model="gpt-test")
        turn.call(lambda: None)
        turn.usage(input_tokens=120, output_tokens=30)
        ep.record_mistake("tool_error")
        ep.finish(True)
    turns = _metric(otel, "budgetmix.episode.turns")
    assert turns.unit == "{turn}" and turns.description
    (point,) = turns.data.data_points
    assert tuple(point.explicit_bounds[:6]) == (0, 1, 2, 3, 4, 5)  # one bucket per turn
    assert dict(point.attributes) == {"gen_ai.agent.name": "triage", "status": "success"}
    mistakes = _metric(otel, "budgetmix.mistakes")
    assert mistakes.description
    assert dict(mistakes.data.data_points[0].attributes)["gen_ai.agent.name"] == "triage"
    tokens = _metric(otel, "gen_ai.client.token.usage")
    assert tokens.unit == "{token}"
    by_type = {p.attributes["gen_ai.token.type"]: p for p in tokens.data.data_points}
    assert (by_type["input"].sum, by_type["output"].sum) == (120, 30)
    assert by_type["input"].attributes["gen_ai.request.model"] == "gpt-test"
    assert by_type["input"].attributes["gen_ai.provider.name"] == "openai"
    duration = _metric(otel, "gen_ai.client.operation.duration")
    assert duration.unit == "s"
    (call,) = duration.data.data_points
    assert call.count == 1 and call.attributes["gen_ai.operation.name"] == "chat"


def test_the_conventional_switch_turns_content_capture_on(
    otel: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    assert BudgetController(Budget(turns=1)).capture_content is True
    assert BudgetController(Budget(turns=1), capture_content=False).capture_content is False
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "false")
    assert BudgetController(Budget(turns=1)).capture_content is False


def test_an_episode_that_charged_nothing_beside_a_budgeted_client_warns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    openai = pytest.importorskip("openai")
    from budgetmix.adapters import budgeted

    controller = BudgetController(Budget(turns=3))
    budgeted(openai.OpenAI(api_key="test", base_url="http://127.0.0.1:9/v1"), controller)
    quiet = BudgetController(Budget(turns=3))  # nothing wired: silent
    caplog.set_level(logging.WARNING, logger="budgetmix")
    with controller.episode(name="quiet") as ep:
        ep.finish(True)
    (warning,) = [r for r in caplog.records if "charged no turn" in r.getMessage()]
    assert "'quiet'" in warning.getMessage() and "budgeted(OpenAI())" in warning.getMessage()
    with quiet.episode() as ep:
        ep.finish(True)
    assert len([r for r in caplog.records if "charged no turn" in r.getMessage()]) == 1


def test_the_demo_captures_content_when_asked(tmp_path: Any) -> None:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    cmd = [sys.executable, "-m", "budgetmix.cli", "demo", "--quick", "--stages", "controller"]
    cmd += ["--trace", "jsonl", "--capture-content", "--out", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    spans = [json.loads(line) for line in (tmp_path / "traces.jsonl").read_text().splitlines()]
    chats = [s for s in spans if s["name"].startswith("chat")]
    assert chats and all("gen_ai.input.messages" in s["attributes"] for s in chats)
