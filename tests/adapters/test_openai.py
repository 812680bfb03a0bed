"""The OpenAI client wrapper: real ``openai`` clients over an in-process fake LLM that
answers in the Chat Completions and Responses wire formats (whole and SSE)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from _provider_fakes import CHAT_TOOLS, RESPONSES_TOOLS, kinds, last_message, make_rig
from budgetmix import (
    Budget,
    BudgetController,
    BudgetExhausted,
    ConfigError,
    EpisodeStatus,
    ProviderError,
)
from budgetmix.adapters import budgeted
from budgetmix.adapters.base import ToolCallRequest
from budgetmix.adapters.openai import AsyncBudgetedOpenAI, BudgetedOpenAI
from budgetmix.adapters.pricing import Pricing
from budgetmix.adapters.testing import Reply

openai = pytest.importorskip("openai")

USER = [{"role": "user", "content": "what is 1+2?"}]


# -- chat completions ------------------------------------------------------------------
def test_chat_injects_notice_records_usage_and_cost() -> None:
    rig = make_rig([Reply.say("3", input_tokens=1000, output_tokens=100)])
    client = budgeted(rig.openai(), rig.controller)
    assert isinstance(client, BudgetedOpenAI)
    history = list(USER)
    with rig.controller.episode() as ep:
        reply = client.chat.completions.create(model="gpt-4o", messages=history)
        ep.finish(True, reply.choices[0].message.content)
    assert reply.choices[0].message.content == "3"
    assert history == USER  # the caller's history is never touched
    sent = rig.fake.requests[0].json["messages"]
    assert sent[:-1] == USER
    assert sent[-1] == {
        "role": "user",
        "content": "Budget (v1): turn 1 of 5, 5 turns left including this one.",
    }
    used = ep.result.used if ep.result else {}
    assert used["turns"] == 1 and used["input_tokens"] == 1000 and used["output_tokens"] == 100
    assert used["cost_usd"] == pytest.approx(1000 * 2.5e-6 + 100 * 10e-6)
    (span,) = rig.spans("chat")
    assert span.attributes is not None
    assert span.attributes["gen_ai.usage.input_tokens"] == 1000
    assert span.attributes["gen_ai.response.finish_reasons"] == ("stop",)


def test_chat_tool_call_mistakes_unknown_invalid_json_and_schema() -> None:
    calls = (
        ToolCallRequest(name="add", arguments='{"a": 1, "b": 2}'),
        ToolCallRequest(name="add", arguments='{"a": 1}'),
        ToolCallRequest(name="add", arguments='{"a": "x", "b": 2}'),
        ToolCallRequest(name="mul", arguments="{}"),
        ToolCallRequest(name="add", arguments='{"a": 1, "b'),
    )
    rig = make_rig([Reply(tool_calls=calls)])
    client = budgeted(rig.openai(), rig.controller)
    with rig.controller.episode() as ep:
        client.chat.completions.create(model="gpt-4o", messages=USER, tools=CHAT_TOOLS)
    assert kinds(ep) == [
        "invalid_tool_arguments",
        "invalid_tool_arguments",
        "unknown_tool",
        "invalid_tool_arguments",
    ]
    details = [m.detail for m in ep.mistakes]
    assert "missing required property 'b'" in details[0]
    assert "$.a: expected integer" in details[1]
    assert "not valid JSON" in details[3]
    assert ep.mistakes[2].tool == "mul"


def test_truncated_arguments_missing_usage_and_empty_choices_are_recorded() -> None:
    truncated = Reply(
        tool_calls=(ToolCallRequest(name="add", arguments='{"a": 1, "b": 2'),),
        finish_reason="length",
        usage=False,
    )
    rig = make_rig([truncated, Reply(empty=True)])
    client = budgeted(rig.openai(), rig.controller)
    with rig.controller.episode() as ep:
        client.chat.completions.create(model="gpt-4o", messages=USER, tools=CHAT_TOOLS)
        empty = client.chat.completions.create(model="gpt-4o", messages=USER)
    assert empty.choices == []
    assert kinds(ep) == ["invalid_tool_arguments", "model_format_error"]
    assert "truncated" in ep.mistakes[0].detail
    first = rig.spans("chat")[0]
    assert [e.name for e in first.events][:2] == [
        "budgetmix.usage_missing",
        "budgetmix.response_truncated",
    ]
    assert ep.result is not None and ep.result.used["input_tokens"] > 0  # second reply had usage


def test_refused_turn_never_reaches_the_network() -> None:
    rig = make_rig(turns=1)
    client = budgeted(rig.openai(), rig.controller)
    with rig.controller.episode() as ep:
        client.chat.completions.create(model="gpt-4o", messages=USER)
        with pytest.raises(BudgetExhausted) as info:
            client.chat.completions.create(model="gpt-4o", messages=USER)
    assert rig.net.count == 1
    assert info.value.dimension == "turns"
    assert ep.result is not None and ep.result.status is EpisodeStatus.BUDGET_EXHAUSTED


def test_exhaustion_ends_the_episode_cleanly_when_uncaught() -> None:
    rig = make_rig(turns=1)
    client = budgeted(rig.openai(), rig.controller)
    with rig.controller.episode() as ep:
        for _ in range(3):
            client.chat.completions.create(model="gpt-4o", messages=USER)
    assert ep.result is not None and ep.result.status is EpisodeStatus.BUDGET_EXHAUSTED
    assert rig.net.count == 1


def test_transient_errors_are_retried_by_our_policy_without_consuming_turns() -> None:
    rig = make_rig([Reply.error(429, retry_after=2), Reply(disconnect=True), Reply.say("ok")])
    client = budgeted(rig.openai(), rig.controller, sleep=rig.sleep)
    with rig.controller.episode() as ep:
        reply = client.chat.completions.create(model="gpt-4o", messages=USER)
        ep.finish(True)
    assert reply.choices[0].message.content == "ok"
    assert rig.net.count == 3  # SDK retries are off: every attempt is one of ours
    assert rig.sleeps[0] == 2.0 and len(rig.sleeps) == 2  # Retry-After honoured
    assert ep.result is not None and ep.result.used["turns"] == 1
    retries = [e for e in rig.spans("chat")[0].events if e.name == "budgetmix.retry"]
    assert len(retries) == 2


def test_retries_exhausted_is_a_provider_error_mistake_and_refunded_turn() -> None:
    rig = make_rig([Reply.error(503)] * 3)
    client = budgeted(rig.openai(), rig.controller, sleep=rig.sleep)
    with pytest.raises(ProviderError) as info, rig.controller.episode() as ep:
        client.chat.completions.create(model="gpt-4o", messages=USER)
    assert isinstance(info.value.__cause__, openai.InternalServerError)
    assert info.value.status_code == 503 and info.value.retryable
    assert rig.net.count == 3
    assert kinds(ep) == ["provider_error"]
    assert ep.result is not None and ep.result.status is EpisodeStatus.ERROR
    assert ep.result.used["turns"] == 0


def test_client_errors_are_not_retried() -> None:
    rig = make_rig([Reply.error(400, "bad request")])
    client = budgeted(rig.openai(), rig.controller, sleep=rig.sleep)
    with rig.controller.episode() as ep, pytest.raises(ProviderError) as info:
        client.chat.completions.create(model="gpt-4o", messages=USER)
    assert isinstance(info.value.__cause__, openai.BadRequestError)
    assert rig.net.count == 1 and rig.sleeps == []
    assert kinds(ep) == ["provider_error"]


def test_cost_limit_with_unknown_model_is_a_config_error_before_sending() -> None:
    rig = make_rig(cost_usd=1.0)
    client = budgeted(rig.openai(), rig.controller)
    with rig.controller.episode() as ep:
        with pytest.raises(ConfigError, match="no price known for 'my-local-model'"):
            client.chat.completions.create(model="my-local-model", messages=USER)
        assert rig.net.count == 0 and ep.state.used["turns"] == 0
        priced = budgeted(rig.openai(), rig.controller, pricing=Pricing({"my-local-model": (1, 2)}))
        priced.chat.completions.create(model="my-local-model", messages=USER)
        assert ep.state.used["cost_usd"] > 0


def test_grace_turn_keeps_tools_but_forbids_calling_them() -> None:
    rig = make_rig(turns=1, exhaustion="grace")
    client = budgeted(rig.openai(), rig.controller)
    with rig.controller.episode() as ep:
        client.chat.completions.create(model="gpt-4o", messages=USER, tools=CHAT_TOOLS)
        client.chat.completions.create(model="gpt-4o", messages=USER, tools=CHAT_TOOLS)
        with pytest.raises(BudgetExhausted):
            client.chat.completions.create(model="gpt-4o", messages=USER, tools=CHAT_TOOLS)
    grace = rig.fake.requests[1].json
    assert grace["tools"] == CHAT_TOOLS and grace["tool_choice"] == "none"
    assert grace["messages"][-1]["content"].endswith("the final turn.")
    assert ep.result is not None and ep.result.grace_turn
    assert rig.net.count == 2


def test_outside_an_episode_the_wrapper_is_transparent() -> None:
    rig = make_rig()
    client = budgeted(rig.openai(), rig.controller)
    client.chat.completions.create(model="gpt-4o", messages=USER)
    assert rig.fake.requests[0].json["messages"] == USER
    assert client.base_url == client.unwrapped.base_url


def test_an_episode_target_is_charged_without_entering_it_as_current() -> None:
    rig = make_rig()
    other = BudgetController(Budget(turns=3))
    with rig.controller.episode() as ep, other.episode() as unrelated:
        client = budgeted(rig.openai(), ep)
        client.chat.completions.create(model="gpt-4o", messages=USER)
        assert ep.state.used["turns"] == 1 and unrelated.state.used["turns"] == 0
        by_controller = budgeted(rig.openai(), rig.controller)
        by_controller.chat.completions.create(model="gpt-4o", messages=USER)
        assert ep.state.used["turns"] == 1  # the current episode belongs to `other`


# -- streaming -------------------------------------------------------------------------
def test_chat_stream_counts_before_and_reads_usage_at_the_end() -> None:
    rig = make_rig([Reply(text="hello", tool_calls=(ToolCallRequest(name="add", arguments="{}"),))])
    client = budgeted(rig.openai(), rig.controller)
    with rig.controller.episode() as ep:
        stream = client.chat.completions.create(
            model="gpt-4o", messages=USER, tools=CHAT_TOOLS, stream=True
        )
        assert ep.state.used["turns"] == 1 and ep.state.used["input_tokens"] == 0
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert ep.state.used["input_tokens"] > 0 and ep.state.used["output_tokens"] > 0
    assert text == "hello"
    assert rig.fake.requests[0].json["stream_options"] == {"include_usage": True}
    assert kinds(ep) == ["invalid_tool_arguments"]  # '{}' misses a and b, assembled from deltas


def test_chat_stream_closed_early_records_once_without_usage() -> None:
    rig = make_rig([Reply.say("a long answer")])
    client = budgeted(rig.openai(), rig.controller)
    with rig.controller.episode() as ep:
        with client.chat.completions.create(model="gpt-4o", messages=USER, stream=True) as s:
            next(iter(s))
        assert ep.state.used["input_tokens"] == 0
    events = [e.name for e in rig.spans("chat")[0].events]
    assert events.count("budgetmix.usage_missing") == 1


def test_responses_create_and_stream() -> None:
    call = ToolCallRequest(name="add", arguments='{"a": 1, "b": "2"}')
    rig = make_rig([Reply(tool_calls=(call,)), Reply.say("3")])
    client = budgeted(rig.openai(), rig.controller)
    with rig.controller.episode() as ep:
        first = client.responses.create(model="gpt-4o", input="what is 1+2?", tools=RESPONSES_TOOLS)
        assert first.output[0].type == "function_call"
        stream = client.responses.create(model="gpt-4o", input=[*USER], stream=True)
        events = [e.type for e in stream]
    assert events[-1] == "response.completed"
    sent = rig.fake.requests[0].json["input"]
    assert sent == [
        {"role": "user", "content": "what is 1+2?"},
        {"role": "user", "content": "Budget (v1): turn 1 of 5, 5 turns left including this one."},
    ]
    assert "stream_options" not in rig.fake.requests[1].json
    assert kinds(ep) == ["invalid_tool_arguments"]
    assert ep.state.used["turns"] == 2 and ep.state.used["output_tokens"] > 1


# -- async -----------------------------------------------------------------------------
async def test_async_chat_responses_and_streams() -> None:
    rig = make_rig([Reply.error(500), Reply.say("a"), Reply.say("b"), Reply.say("c")])
    client = budgeted(rig.openai(is_async=True), rig.controller, sleep=rig.asleep())
    assert isinstance(client, AsyncBudgetedOpenAI)
    async with rig.controller.episode() as ep:
        one = await client.chat.completions.create(model="gpt-4o", messages=USER)
        two = await client.responses.create(model="gpt-4o", input="hi")
        stream = await client.chat.completions.create(model="gpt-4o", messages=USER, stream=True)
        chunks = [c async for c in stream]
        ep.finish(True)
    assert one.choices[0].message.content == "a" and two.output_text == "b"
    assert chunks[-1].usage is not None
    assert rig.net.count == 4 and len(rig.sleeps) == 1
    assert ep.result is not None and ep.result.used["turns"] == 3
    assert kinds(ep) == []
    assert all(
        r.json["messages" if "messages" in r.json else "input"][-1]["content"].startswith("Budget")
        for r in rig.fake.requests
    )


async def test_async_refused_turn_sends_nothing() -> None:
    rig = make_rig(turns=1)
    client = budgeted(rig.openai(is_async=True), rig.controller)
    async with rig.controller.episode():
        await client.responses.create(model="gpt-4o", input="hi")
        with pytest.raises(BudgetExhausted):
            await client.responses.create(model="gpt-4o", input="hi")
    assert rig.net.count == 1


def test_notice_lands_after_tool_results() -> None:
    rig = make_rig()
    client = budgeted(rig.openai(), rig.controller)
    history: list[dict[str, Any]] = [
        *USER,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": json.dumps(3)},
    ]
    with rig.controller.episode():
        client.chat.completions.create(model="gpt-4o", messages=history, tools=CHAT_TOOLS)
    sent = rig.fake.requests[0].json["messages"]
    assert sent[:3] == history and last_message(rig)["role"] == "user"


def test_unreadable_body_is_a_response_format_error() -> None:
    from budgetmix import ResponseFormatError

    rig = make_rig([Reply(body=b"<html>gateway</html>")])
    client = budgeted(rig.openai(), rig.controller, sleep=rig.sleep)
    with rig.controller.episode() as ep, pytest.raises(ResponseFormatError) as info:
        client.chat.completions.create(model="gpt-4o", messages=USER)
    assert isinstance(info.value.__cause__, ValueError)
    assert kinds(ep) == ["provider_error"] and rig.net.count == 1


def test_sdks_are_imported_lazily_and_missing_ones_name_the_extra() -> None:
    import subprocess
    import sys

    code = (
        "import sys, budgetmix, budgetmix.adapters.openai, budgetmix.adapters.anthropic, "
        "budgetmix.adapters.http, budgetmix.adapters.pricing, budgetmix.adapters.testing;"
        "print(sorted(m for m in ('openai', 'anthropic') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    code = (
        "import sys; sys.modules['openai'] = None\n"
        "from budgetmix.adapters import budgeted\n"
        "from budgetmix import MissingExtraError\n"
        "try:\n    budgeted(object())\nexcept MissingExtraError as e:\n    print(e.extra)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "openai"
