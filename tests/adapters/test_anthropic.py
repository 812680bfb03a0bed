"""The Anthropic client wrapper: real ``anthropic`` clients (httpx2) over the in-process
fake LLM answering in the Messages wire format, whole and as server-sent events."""

from __future__ import annotations

import json
from typing import Any

import pytest
from _provider_fakes import ANTHROPIC_MODEL, ANTHROPIC_TOOLS, kinds, make_rig
from budgetmix import BudgetExhausted, EpisodeStatus, MistakeKind, ProviderError
from budgetmix.adapters import budgeted
from budgetmix.adapters.anthropic import AsyncBudgetedAnthropic, BudgetedAnthropic
from budgetmix.adapters.base import ToolCallRequest
from budgetmix.adapters.testing import Reply

anthropic = pytest.importorskip("anthropic")

USER = [{"role": "user", "content": "what is 1+2?"}]
FAILED_TOOL: list[dict[str, Any]] = [
    *USER,
    {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "t1", "name": "add", "input": {}}],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "boom", "is_error": True}
        ],
    },
]


def test_create_injects_after_tool_results_and_records_everything() -> None:
    calls = (
        ToolCallRequest(name="add", arguments='{"a": 1, "b": 2}'),
        ToolCallRequest(name="add", arguments='{"a": 1}'),
        ToolCallRequest(name="sub", arguments="{}"),
    )
    rig = make_rig([Reply(tool_calls=calls, input_tokens=1000, output_tokens=10)])
    client = budgeted(rig.anthropic(), rig.controller)
    assert isinstance(client, BudgetedAnthropic)
    history = [dict(m) for m in FAILED_TOOL]
    with rig.controller.episode() as ep:
        msg = client.messages.create(
            model=ANTHROPIC_MODEL, max_tokens=64, messages=history, tools=ANTHROPIC_TOOLS
        )
    assert [b.type for b in msg.content] == ["tool_use"] * 3
    assert history == FAILED_TOOL
    last = rig.fake.requests[0].json["messages"][-1]
    assert [b["type"] for b in last["content"]] == ["tool_result", "text"]
    assert (
        last["content"][1]["text"] == "Budget (v1): turn 1 of 5, 5 turns left including this one."
    )
    assert kinds(ep) == ["tool_error", "invalid_tool_arguments", "unknown_tool"]
    assert ep.mistakes[0].call_id == "t1" and ep.mistakes[0].detail == "boom"
    assert ep.state.used["cost_usd"] == pytest.approx(1000 * 3e-6 + 10 * 15e-6)


def test_is_error_results_already_recorded_are_not_recorded_again() -> None:
    rig = make_rig()
    client = budgeted(rig.anthropic(), rig.controller)
    with rig.controller.episode() as ep:
        ep.record_mistake(MistakeKind.TOOL_ERROR, tool="add", call_id="t1", detail="raised")
        client.messages.create(model=ANTHROPIC_MODEL, max_tokens=8, messages=FAILED_TOOL)
        client.messages.create(model=ANTHROPIC_MODEL, max_tokens=8, messages=FAILED_TOOL)
    assert kinds(ep) == ["tool_error"]


def test_stream_helper_counts_on_open_and_records_at_the_end() -> None:
    truncated = Reply(
        tool_calls=(ToolCallRequest(name="add", arguments='{"a": 1, "b'),), finish_reason="length"
    )
    rig = make_rig([Reply.say("three"), truncated])
    client = budgeted(rig.anthropic(), rig.controller)
    with rig.controller.episode() as ep:
        manager = client.messages.stream(model=ANTHROPIC_MODEL, max_tokens=8, messages=USER)
        assert ep.state.used["turns"] == 0
        with manager as stream:
            assert ep.state.used["turns"] == 1
            text = "".join(stream.text_stream)
        assert ep.state.used["output_tokens"] > 0
        with client.messages.stream(
            model=ANTHROPIC_MODEL, max_tokens=8, messages=USER, tools=ANTHROPIC_TOOLS
        ) as stream:
            final = stream.get_final_message()
    assert text == "three" and final.stop_reason == "max_tokens"
    assert kinds(ep) == ["invalid_tool_arguments"]
    assert "truncated" in ep.mistakes[0].detail
    assert rig.fake.requests[0].json["stream"] is True


def test_create_with_stream_true_yields_raw_events() -> None:
    rig = make_rig([Reply.say("hi")])
    client = budgeted(rig.anthropic(), rig.controller)
    with rig.controller.episode() as ep:
        events = list(
            client.messages.create(model=ANTHROPIC_MODEL, max_tokens=8, messages=USER, stream=True)
        )
    assert events[0].type == "message_start" and events[-1].type == "message_stop"
    assert ep.state.used["input_tokens"] > 0 and ep.state.used["output_tokens"] > 0


def test_overloaded_is_retried_and_refusal_sends_nothing() -> None:
    rig = make_rig([Reply.error(529, "overloaded"), Reply.say("ok")], turns=1)
    client = budgeted(rig.anthropic(), rig.controller, sleep=rig.sleep)
    with rig.controller.episode() as ep:
        client.messages.create(model=ANTHROPIC_MODEL, max_tokens=8, messages=USER)
        with pytest.raises(BudgetExhausted):
            client.messages.create(model=ANTHROPIC_MODEL, max_tokens=8, messages=USER)
    assert rig.net.count == 2 and len(rig.sleeps) == 1
    assert ep.result is not None and ep.result.status is EpisodeStatus.BUDGET_EXHAUSTED


def test_final_failure_is_a_provider_error_from_the_sdk_error() -> None:
    rig = make_rig([Reply.error(429)] * 3)
    client = budgeted(rig.anthropic(), rig.controller, sleep=rig.sleep)
    with pytest.raises(ProviderError) as info, rig.controller.episode() as ep:
        client.messages.create(model=ANTHROPIC_MODEL, max_tokens=8, messages=USER)
    assert isinstance(info.value.__cause__, anthropic.RateLimitError)
    assert kinds(ep) == ["provider_error"] and rig.net.count == 3


async def test_async_create_and_stream() -> None:
    rig = make_rig([Reply.say("a"), Reply.say("b")])
    client = budgeted(rig.anthropic(is_async=True), rig.controller)
    assert isinstance(client, AsyncBudgetedAnthropic)
    async with rig.controller.episode() as ep:
        one = await client.messages.create(model=ANTHROPIC_MODEL, max_tokens=8, messages=USER)
        async with client.messages.stream(
            model=ANTHROPIC_MODEL, max_tokens=8, messages=USER
        ) as stream:
            two = await stream.get_final_text()
        ep.finish(True)
    assert one.content[0].text == "a" and two == "b"
    assert ep.result is not None and ep.result.used["turns"] == 2
    assert ep.result.used["output_tokens"] >= 2


def test_outside_an_episode_the_stream_helper_is_the_sdks() -> None:
    rig = make_rig([Reply.say("x")])
    client = budgeted(rig.anthropic(), rig.controller)
    with client.messages.stream(model=ANTHROPIC_MODEL, max_tokens=8, messages=USER) as stream:
        assert stream.get_final_text() == "x"
    assert rig.fake.requests[0].json["messages"] == USER


def test_parse_and_with_raw_response_are_budgeted() -> None:
    from pydantic import BaseModel

    class Answer(BaseModel):
        value: int

    rig = make_rig([Reply.say('{"value": 3}', input_tokens=11), Reply.say("raw", input_tokens=13)])
    client = budgeted(rig.anthropic(), rig.controller)
    kw: dict[str, Any] = {"model": ANTHROPIC_MODEL, "max_tokens": 64, "messages": USER}
    with rig.controller.episode() as ep:
        parsed = client.messages.parse(**kw, output_format=Answer)
        raw = client.messages.with_raw_response.create(**kw)
        assert ep.state.used["input_tokens"] == 24  # recorded before the caller parses
    assert parsed.parsed_output == Answer(value=3)
    assert raw.parse().content[0].text == "raw" and raw.headers["content-type"]
    assert ep.state.used["turns"] == 2
    assert all("Budget (v1)" in json.dumps(r.json["messages"]) for r in rig.fake.requests)


def test_with_streaming_response_is_budgeted_at_the_http_layer() -> None:
    rig = make_rig([Reply.say("whole", input_tokens=5), Reply.say("streamed", input_tokens=6)])
    client = budgeted(rig.anthropic(), rig.controller)
    kw: dict[str, Any] = {"model": ANTHROPIC_MODEL, "max_tokens": 64, "messages": USER}
    with rig.controller.episode() as ep:
        with client.messages.with_streaming_response.create(**kw) as response:
            text = response.parse().content[0].text
        with client.messages.with_streaming_response.create(**kw, stream=True) as response:
            lines = list(response.iter_lines())
        used = dict(ep.state.used)
    assert text == "whole" and any("text_delta" in line for line in lines)
    assert used["turns"] == 2 and used["input_tokens"] == 11  # read from JSON and events
    assert all("Budget (v1)" in json.dumps(r.json["messages"]) for r in rig.fake.requests)
    assert len(rig.spans("chat")) == 2


async def test_async_with_streaming_response_is_budgeted() -> None:
    rig = make_rig([Reply.say("streamed", input_tokens=6)], turns=1)
    client = budgeted(rig.anthropic(is_async=True), rig.controller)
    kw: dict[str, Any] = {"model": ANTHROPIC_MODEL, "max_tokens": 64, "messages": USER}
    async with rig.controller.episode() as ep:
        async with client.messages.with_streaming_response.create(**kw, stream=True) as response:
            lines = [line async for line in response.iter_lines()]
        with pytest.raises(BudgetExhausted):
            async with client.messages.with_streaming_response.create(**kw) as response:
                pass
        used = dict(ep.state.used)
    assert any("message_stop" in line for line in lines)
    assert used["turns"] == 1 and used["input_tokens"] == 6 and rig.net.count == 1


async def test_async_parse_and_with_raw_response_are_budgeted() -> None:
    from pydantic import BaseModel

    class Answer(BaseModel):
        value: int

    rig = make_rig(
        [
            Reply.say('{"value": 3}', input_tokens=11),
            Reply.say("raw", input_tokens=13),
            Reply.say("streamed", input_tokens=5),
        ]
    )
    client = budgeted(rig.anthropic(is_async=True), rig.controller)
    kw: dict[str, Any] = {"model": ANTHROPIC_MODEL, "max_tokens": 64, "messages": USER}
    async with rig.controller.episode() as ep:
        parsed = await client.messages.parse(**kw, output_format=Answer)
        raw = await client.messages.with_raw_response.create(**kw)
        assert ep.state.used["input_tokens"] == 24  # recorded before the caller parses
        raw_stream = await client.messages.with_raw_response.create(**kw, stream=True)
        events = [e.type async for e in await raw_stream.parse()]
        assert await raw_stream.parse() is await raw_stream.parse()
    assert parsed.parsed_output == Answer(value=3)
    assert (await raw.parse()).content[0].text == "raw"
    assert events[-1] == "message_stop"
    assert ep.state.used["turns"] == 3 and ep.state.used["input_tokens"] == 29
    assert all("Budget (v1)" in json.dumps(r.json["messages"]) for r in rig.fake.requests)
