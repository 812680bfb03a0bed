"""OpenAIChatModel and AnthropicChatModel: the provider translations the built-in loop
(``run_agent``) drives, checked on the wire the fake LLM sees."""

from __future__ import annotations

import pytest
from _provider_fakes import ANTHROPIC_MODEL, make_rig
from budgetmix import Budget, BudgetController, EpisodeStatus
from budgetmix.adapters.anthropic import AnthropicChatModel
from budgetmix.adapters.base import ChatMessage, ToolCallRequest, ToolSpec
from budgetmix.adapters.loop import arun_agent, run_agent
from budgetmix.adapters.openai import OpenAIChatModel
from budgetmix.adapters.testing import Reply

pytest.importorskip("openai")
pytest.importorskip("anthropic")

ADD = ToolSpec(
    name="add",
    description="Add two integers.",
    parameters={"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
)


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def test_openai_chat_model_translates_and_keeps_tools_on_tool_choice_none() -> None:
    rig = make_rig(
        [Reply(text="thinking", tool_calls=(ToolCallRequest(name="add", arguments='{"a": 1}'),))]
    )
    model = OpenAIChatModel(rig.openai(), "gpt-4o")
    history = [
        ChatMessage(role="system", content="be brief"),
        ChatMessage(role="user", content="hi"),
        ChatMessage(
            role="assistant", tool_calls=(ToolCallRequest(id="c0", name="add", arguments="{}"),)
        ),
        ChatMessage(role="tool", content="error", tool_call_id="c0", is_error=True),
    ]
    reply = model.complete(history, [ADD], notice="NOTICE", tool_choice="none")
    assert reply.text == "thinking" and reply.finish_reason == "tool_calls"
    assert reply.tool_calls == (ToolCallRequest(id="call_1_0", name="add", arguments='{"a": 1}'),)
    assert reply.usage is not None and reply.usage.input_tokens > 0
    body = rig.fake.requests[0].json
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "tool", "user"]
    assert body["messages"][-1]["content"] == "NOTICE"
    assert body["messages"][2]["tool_calls"][0]["function"]["name"] == "add"
    assert body["tool_choice"] == "none" and body["tools"][0]["function"]["name"] == "add"


def test_openai_chat_model_empty_choices_is_an_error_response() -> None:
    rig = make_rig([Reply(empty=True)])
    reply = OpenAIChatModel(rig.openai(), "gpt-4o").complete(
        [ChatMessage(role="user", content="hi")], [], notice=None
    )
    assert reply.finish_reason == "error" and reply.text == ""


def test_anthropic_chat_model_groups_tool_results_and_appends_the_notice() -> None:
    rig = make_rig([Reply.call("add", {"a": 1})])
    model = AnthropicChatModel(rig.anthropic(), ANTHROPIC_MODEL, max_tokens=32)
    history = [
        ChatMessage(role="system", content="be brief"),
        ChatMessage(role="user", content="hi"),
        ChatMessage(
            role="assistant",
            content="calling",
            tool_calls=(
                ToolCallRequest(id="t1", name="add", arguments='{"a": 1}'),
                ToolCallRequest(id="t2", name="add", arguments="not json"),
            ),
        ),
        ChatMessage(role="tool", content="2", tool_call_id="t1"),
        ChatMessage(role="tool", content="bad args", tool_call_id="t2", is_error=True),
    ]
    reply = model.complete(history, [ADD], notice="NOTICE", tool_choice="none")
    assert reply.finish_reason == "tool_calls" and reply.tool_calls[0].arguments == '{"a": 1}'
    body = rig.fake.requests[0].json
    assert body["system"] == "be brief" and body["max_tokens"] == 32
    assert body["tool_choice"] == {"type": "none"} and body["tools"][0]["input_schema"]
    assistant, results = body["messages"][1], body["messages"][2]
    assert [b["type"] for b in assistant["content"]] == ["text", "tool_use", "tool_use"]
    assert assistant["content"][2]["input"] == {}
    assert [b["type"] for b in results["content"]] == ["tool_result", "tool_result", "text"]
    assert results["content"][1]["is_error"] is True and results["content"][2]["text"] == "NOTICE"


def test_run_agent_over_openai_with_a_grace_turn() -> None:
    rig = make_rig([Reply.call("add", {"a": 1, "b": 2})] * 2 + [Reply.say("probably 3")])
    controller = BudgetController(Budget(turns=2), exhaustion="grace")
    run = run_agent(OpenAIChatModel(rig.openai(), "gpt-4o"), [add], "1+2?", controller)
    assert run.status is EpisodeStatus.BUDGET_EXHAUSTED and run.output == "probably 3"
    grace = rig.fake.requests[-1].json
    assert grace["tool_choice"] == "none" and grace["tools"]
    assert grace["messages"][-1]["content"].endswith("the final turn.")
    assert all(m["role"] != "user" or "Budget" not in m["content"] for m in grace["messages"][:-1])


async def test_arun_agent_over_anthropic() -> None:
    rig = make_rig([Reply.call("add", {"a": 1, "b": 2}), Reply.say("3")])
    model = AnthropicChatModel(rig.anthropic(is_async=True), ANTHROPIC_MODEL)
    run = await arun_agent(model, [add], "1+2?", Budget(turns=4))
    assert run.output == "3" and run.result.used["turns"] == 2
    assert run.result.used["cost_usd"] > 0
    second = rig.fake.requests[1].json["messages"][-1]["content"]
    assert second[0] == {
        "type": "tool_result",
        "tool_use_id": "toolu_1_0",
        "content": "3",
        "is_error": False,
    }


def test_the_built_in_loop_prices_cached_input_like_the_wrappers() -> None:
    reply = Reply.say(
        "done", input_tokens=1000, output_tokens=10, cached_tokens=500, cache_write_tokens=300
    )
    rig = make_rig([reply])
    model = AnthropicChatModel(rig.anthropic(), ANTHROPIC_MODEL, max_tokens=64)
    run = run_agent(model, [], "hi", rig.controller)
    used = run.result.used
    assert used["input_tokens"] == 1000
    assert used["cost_usd"] == pytest.approx((200 * 3.0 + 500 * 0.3 + 300 * 3.75 + 150) / 1e6)

    rig = make_rig([Reply.say("done", input_tokens=1000, output_tokens=10, cached_tokens=800)])
    run = run_agent(OpenAIChatModel(rig.openai(), "gpt-4o"), [], "hi", rig.controller)
    assert run.result.used["cost_usd"] == pytest.approx((200 * 2.5 + 800 * 1.25 + 100) / 1e6)
