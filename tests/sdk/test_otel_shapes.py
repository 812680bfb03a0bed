"""OpenTelemetry shapes: span names, hierarchy, gen_ai.* and budgetmix.* attributes,
events, metrics, opt-in content, and no secrets anywhere in exported data."""

from __future__ import annotations

import json
from typing import Any

import pytest
from _sdk_doubles import FakeClock
from budgetmix import AccountingPolicy, Budget, BudgetController, ProviderError, RetryPolicy
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import SpanKind, StatusCode

API_KEY = "sk-test-DEADBEEFdeadbeef0123456789abcdef"
AUTH = "Authorization: Bearer tok-SECRET-0123456789"


def _controller(otel: Any, clock: FakeClock, **kw: Any) -> BudgetController:
    return BudgetController(
        kw.pop("budget", Budget(turns=3, tool_calls=5, total_tokens=1000)),
        name="solver",
        provider_name="openai",
        tracer_provider=otel.tracer_provider,
        meter_provider=otel.meter_provider,
        clock=clock,
        **kw,
    )


def _run(c: BudgetController, *, secret_messages: bool = False) -> Any:
    """Turn 1: two parallel tools, one fails; turn 2: one tool recovers; turn 3: answer."""
    messages: list[Any] = [{"role": "user", "content": "What is 2+3?"}]
    if secret_messages:
        messages.append({"role": "user", "content": f"key={API_KEY}\n{AUTH}"})
    with c.episode(episode_id="ep-1") as ep:
        for turn in ep.turns(model="gpt-test"):
            request = turn.openai_chat(messages)
            turn.record_content(input_messages=request, output_messages=[{"role": "assistant"}])
            turn.usage(
                input_tokens=100,
                output_tokens=20,
                response_model="gpt-test-2025",
                finish_reasons=["tool_calls"],
            )
            if turn.number == 1:
                ok, bad = ep.tool_batch(["add", "lookup"], ["call_a", "call_b"])
                ok.run(lambda a, b, api_key: a + b, 2, 3, api_key=API_KEY)
                with pytest.raises(PermissionError):
                    bad.run(_raise_with_secret, headers={"Authorization": AUTH})
            elif turn.number == 2:
                (call,) = ep.tool_batch(["add"], ["call_c"])
                call.run(lambda: 5)
            else:
                ep.finish(success=True, output="5")
    return ep


def _raise_with_secret(headers: dict[str, str]) -> None:
    raise PermissionError(f"denied for {headers['Authorization']} key {API_KEY}")


def test_span_names_kinds_and_hierarchy(otel: Any, fake_clock: FakeClock) -> None:
    ep = _run(_controller(otel, fake_clock))
    spans = otel.spans()
    names = sorted(s.name for s in spans)
    assert names == sorted(
        [
            "invoke_agent solver",
            "chat gpt-test",
            "chat gpt-test",
            "chat gpt-test",
            "execute_tool add",
            "execute_tool lookup",
            "execute_tool add",
        ]
    )
    agent = otel.span("invoke_agent solver")
    assert agent.kind is SpanKind.INTERNAL and agent.parent is None
    chats = [s for s in spans if s.name.startswith("chat ")]
    tools = [s for s in spans if s.name.startswith("execute_tool ")]
    assert all(s.kind is SpanKind.CLIENT for s in chats)
    assert all(s.kind is SpanKind.INTERNAL for s in tools)
    assert {s.context.trace_id for s in spans} == {agent.context.trace_id}
    assert all(s.parent is not None and s.parent.span_id == agent.context.span_id for s in chats)
    chat_ids = {s.context.span_id for s in chats}
    assert all(s.parent is not None and s.parent.span_id in chat_ids for s in tools)
    assert ep.result.trace_id == format(agent.context.trace_id, "032x")


def test_gen_ai_attributes(otel: Any, fake_clock: FakeClock) -> None:
    _run(_controller(otel, fake_clock))
    agent = otel.span("invoke_agent solver")
    assert agent.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert agent.attributes["gen_ai.agent.name"] == "solver"
    assert agent.attributes["gen_ai.agent.id"] == "ep-1"
    assert agent.attributes["gen_ai.provider.name"] == "openai"
    chats = sorted(
        (s for s in otel.spans() if s.name.startswith("chat ")),
        key=lambda s: s.attributes["budgetmix.turn"],
    )
    assert [s.attributes["budgetmix.turn"] for s in chats] == [1, 2, 3]
    for s in chats:
        a = s.attributes
        assert a["gen_ai.operation.name"] == "chat"
        assert a["gen_ai.provider.name"] == "openai"
        assert a["gen_ai.request.model"] == "gpt-test"
        assert a["gen_ai.response.model"] == "gpt-test-2025"
        assert a["gen_ai.usage.input_tokens"] == 100
        assert a["gen_ai.usage.output_tokens"] == 20
        assert tuple(a["gen_ai.response.finish_reasons"]) == ("tool_call",)  # conventions
    assert [s.attributes["budgetmix.budget.turns.remaining"] for s in chats] == [2, 1, 0]
    tools = {s.attributes["gen_ai.tool.call.id"]: s for s in otel.spans() if "tool" in s.name}
    assert set(tools) == {"call_a", "call_b", "call_c"}
    for cid, name in (("call_a", "add"), ("call_b", "lookup"), ("call_c", "add")):
        a = tools[cid].attributes
        assert a["gen_ai.operation.name"] == "execute_tool"
        assert a["gen_ai.tool.name"] == name
        assert a["gen_ai.tool.type"] == "function"
    assert tools["call_b"].status.status_code is StatusCode.ERROR
    assert tools["call_b"].attributes["error.type"] == "tool_error"
    assert tools["call_a"].status.status_code is not StatusCode.ERROR
    # no custom attribute hides under the gen_ai. prefix
    known = {
        "gen_ai.operation.name",
        "gen_ai.provider.name",
        "gen_ai.agent.name",
        "gen_ai.agent.id",
        "gen_ai.request.model",
        "gen_ai.response.model",
        "gen_ai.response.finish_reasons",
        "gen_ai.usage.input_tokens",
        "gen_ai.usage.output_tokens",
        "gen_ai.tool.name",
        "gen_ai.tool.call.id",
        "gen_ai.tool.type",
    }
    for s in otel.spans():
        assert {k for k in s.attributes if k.startswith("gen_ai.")} <= known


def test_budget_attributes_on_the_episode_span(otel: Any, fake_clock: FakeClock) -> None:
    _run(_controller(otel, fake_clock))
    a = otel.span("invoke_agent solver").attributes
    assert a["budgetmix.status"] == "success"
    assert "budgetmix.stop_reason" not in a
    assert a["budgetmix.episode.id"] == "ep-1"
    assert a["budgetmix.notice.format"] == "v1"
    assert a["budgetmix.budget.turns.limit"] == 3
    assert a["budgetmix.budget.turns.used"] == 3
    assert a["budgetmix.budget.turns.remaining"] == 0
    assert a["budgetmix.budget.tool_calls.limit"] == 5
    assert a["budgetmix.budget.tool_calls.used"] == 3
    assert a["budgetmix.budget.tool_calls.remaining"] == 2
    assert a["budgetmix.budget.total_tokens.used"] == 360
    assert a["budgetmix.budget.total_tokens.remaining"] == 640
    assert "budgetmix.budget.cost_usd.limit" not in a
    assert a["budgetmix.mistakes"] == 1 and a["budgetmix.recoveries"] == 1
    assert a["budgetmix.accounting.policy"] == "default"
    assert a["budgetmix.accounting.turn_unit"] == "response"
    assert a["budgetmix.accounting.count_failed_tool_calls"] is True


def test_exhaustion_attributes_events_and_metrics(otel: Any, fake_clock: FakeClock) -> None:
    class Once:
        def on_limit(self, view: Any, dimension: str) -> dict[str, float] | None:
            return {"turns": 1} if view.grants == 0 else None

    c = _controller(
        otel,
        fake_clock,
        budget=Budget(turns=4),
        extension=Once(),
        accounting=AccountingPolicy(name="strict", count_retries=True),
    )
    with c.episode() as ep:
        for turn in ep.turns(model="m"):
            if turn.number == 1:
                ep.record_mistake("model_format_error")
            if turn.number == 2:
                ep.record_step(ok=True)
    agent = otel.span("invoke_agent solver")
    a = agent.attributes
    assert a["budgetmix.status"] == "budget_exhausted"
    assert a["budgetmix.stop_reason"] == "turns"
    assert a["budgetmix.budget.turns.limit"] == 5  # after the grant
    assert a["budgetmix.accounting.policy"] == "strict"
    assert a["budgetmix.accounting.count_retries"] is True
    events = {e.name: dict(e.attributes) for e in agent.events}
    assert events["budgetmix.budget.warning"] == {
        "budgetmix.turn": 4,
        "budgetmix.turns_remaining": 1,
    }
    assert events["budgetmix.budget.extended"] == {
        "budgetmix.turn": 4,
        "budgetmix.added_turns": 1,
        "budgetmix.turns_limit": 5,
    }
    assert events["budgetmix.budget.exhausted"] == {
        "budgetmix.turn": 5,
        "budgetmix.dimension": "turns",
    }
    chat_events = {e.name: dict(e.attributes) for s in otel.spans() for e in s.events}
    assert chat_events["budgetmix.mistake"] == {
        "budgetmix.mistake.id": "m1",
        "budgetmix.mistake.kind": "model_format_error",
        "budgetmix.turn": 1,
    }
    assert chat_events["budgetmix.recovery"] == {
        "budgetmix.recovery.id": "r1",
        "budgetmix.recovery.recovered": ("m1",),
        "budgetmix.recovery.turns": 1,
    }

    points = otel.metrics()
    (hist,) = points["budgetmix.episode.turns"]
    assert hist.count == 1 and hist.sum == 5
    agent = {"gen_ai.agent.name": "solver"}
    assert dict(hist.attributes) == {"status": "budget_exhausted", **agent}
    (exh,) = points["budgetmix.exhaustions"]
    assert exh.value == 1 and dict(exh.attributes) == {"dimension": "turns", **agent}
    (mis,) = points["budgetmix.mistakes"]
    assert mis.value == 1 and dict(mis.attributes) == {"kind": "model_format_error", **agent}
    (rec,) = points["budgetmix.recoveries"]
    assert rec.value == 1 and dict(rec.attributes) == agent


def test_mistake_events_carry_tool_and_call_id(otel: Any, fake_clock: FakeClock) -> None:
    _run(_controller(otel, fake_clock))
    (mistake,) = [e for s in otel.spans() for e in s.events if e.name == "budgetmix.mistake"]
    assert dict(mistake.attributes) == {
        "budgetmix.mistake.id": "m1",
        "budgetmix.mistake.kind": "tool_error",
        "budgetmix.turn": 1,
        "gen_ai.tool.name": "lookup",
        "gen_ai.tool.call.id": "call_b",
    }


def test_child_episode_span_nests_under_the_parent(otel: Any, fake_clock: FakeClock) -> None:
    c = _controller(otel, fake_clock)
    with c.episode() as parent:
        parent.begin_turn(model="m")
        with parent.child(Budget(turns=1), name="helper") as child:
            child.begin_turn(model="m")
    p, ch = otel.span("invoke_agent solver"), otel.span("invoke_agent helper")
    assert ch.parent is not None and ch.parent.span_id == p.context.span_id
    assert ch.context.trace_id == p.context.trace_id


def test_conversation_id_on_episode_turn_and_child_spans(otel: Any, fake_clock: FakeClock) -> None:
    c = _controller(otel, fake_clock)
    with c.episode(conversation_id="chat-42") as parent:
        parent.begin_turn(model="m")
        with parent.child(Budget(turns=1), name="helper") as child:
            child.begin_turn(model="m")
    with c.episode(name="other"):
        pass
    key = "gen_ai.conversation.id"
    for span in otel.spans():
        attrs = span.attributes or {}
        expected = None if span.name == "invoke_agent other" else "chat-42"
        assert attrs.get(key) == expected, span.name


def test_error_status_on_crash(otel: Any, fake_clock: FakeClock) -> None:
    c = _controller(otel, fake_clock, retry=RetryPolicy(max_attempts=1))
    with pytest.raises(RuntimeError), c.episode() as ep:
        with ep.begin_turn(model="m") as turn, pytest.raises(ProviderError):
            turn.call(lambda: (_ for _ in ()).throw(ValueError(API_KEY)))
        raise RuntimeError(f"loop bug {API_KEY}")
    agent = otel.span("invoke_agent solver")
    assert agent.status.status_code is StatusCode.ERROR
    assert agent.attributes["error.type"] == "RuntimeError"
    assert agent.attributes["budgetmix.status"] == "error"
    _assert_no_secrets(otel.spans())


def test_content_is_off_by_default(otel: Any, fake_clock: FakeClock) -> None:
    _run(_controller(otel, fake_clock))
    for s in otel.spans():
        for key in (
            "gen_ai.input.messages",
            "gen_ai.output.messages",
            "gen_ai.tool.call.arguments",
            "gen_ai.tool.call.result",
        ):
            assert key not in s.attributes
    assert "2+3" not in _dump(otel.spans())


def test_content_is_opt_in(otel: Any, fake_clock: FakeClock) -> None:
    _run(_controller(otel, fake_clock, capture_content=True))
    chat = next(s for s in otel.spans() if s.attributes.get("budgetmix.turn") == 1)
    sent = json.loads(chat.attributes["gen_ai.input.messages"])
    # the GenAI conventions' parts format (tests/sdk/telemetry/test_genai_content.py)
    assert sent[0] == {"role": "user", "parts": [{"type": "text", "content": "What is 2+3?"}]}
    assert sent[-1]["parts"][0]["content"].startswith("Budget (v1): turn 1 of 3")
    assert json.loads(chat.attributes["gen_ai.output.messages"]) == [
        {"role": "assistant", "parts": [], "finish_reason": "stop"}
    ]
    add = next(s for s in otel.spans() if s.attributes.get("gen_ai.tool.call.id") == "call_a")
    assert add.attributes["gen_ai.tool.call.result"] == "5"


def _dump(spans: list[ReadableSpan]) -> str:
    """Everything a span exporter would ship: names, attributes, events, links, status."""
    parts: list[Any] = []
    for s in spans:
        parts.append(s.to_json())
        parts.append(repr(dict(s.attributes or {})))
        for e in s.events:
            parts.append(e.name)
            parts.append(repr(dict(e.attributes or {})))
        parts.append(repr(s.status.description))
        parts.append(repr(dict(s.resource.attributes)))
    return "\n".join(str(p) for p in parts)


def _assert_no_secrets(spans: list[ReadableSpan]) -> None:
    # a failed tool's error text explains its span: a credential's label may stay there,
    # its value masked
    blob = _dump(spans).replace("Authorization: [REDACTED]", "")
    for secret in (API_KEY, "tok-SECRET", "Bearer", "Authorization", "DEADBEEF"):
        assert secret not in blob, secret


def test_no_api_key_or_authorization_header_in_exported_spans(
    otel: Any, fake_clock: FakeClock
) -> None:
    c = _controller(otel, fake_clock, retry=RetryPolicy(max_attempts=2, jitter=0.0))
    _run(c, secret_messages=True)
    # plus a provider failure whose exception text carries the key
    with c.episode() as ep:
        turn = ep.begin_turn(model="m")

        class AuthError(Exception):
            status_code = 503

        with pytest.raises(ProviderError) as info:
            turn.call(
                lambda: (_ for _ in ()).throw(AuthError(f"{AUTH} {API_KEY}")),
                sleep=fake_clock.sleep,
            )
        assert API_KEY not in str(info.value)
    spans = otel.spans()
    assert len(spans) >= 8 and any(e.name == "budgetmix.retry" for s in spans for e in s.events)
    _assert_no_secrets(spans)


def test_non_recording_tracer_still_enforces(fake_clock: FakeClock) -> None:
    exporter = InMemorySpanExporter()
    tp = TracerProvider(sampler=ALWAYS_OFF)
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    c = BudgetController(Budget(turns=2), tracer_provider=tp, clock=fake_clock)
    with c.episode() as ep:
        n = sum(1 for _ in ep.turns(model="m"))
    assert n == 2 and exporter.get_finished_spans() == ()
    assert ep.result is not None and ep.result.trace_id is not None
