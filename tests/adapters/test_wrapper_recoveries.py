"""Recoveries through the wrapped SDK clients: the tool results a request carries are the
outcomes of the previous response's calls, recorded once per call id."""

from __future__ import annotations

import json
from typing import Any

import pytest
from _provider_fakes import ANTHROPIC_MODEL, ANTHROPIC_TOOLS, CHAT_TOOLS, make_rig
from budgetmix.adapters import budgeted
from budgetmix.adapters import budgeted as budgeted_anthropic
from budgetmix.adapters.base import ToolCallRequest
from budgetmix.adapters.testing import Reply

pytest.importorskip("openai")
pytest.importorskip("anthropic")


def assistant_call(call_id: str, args: str) -> dict[str, Any]:
    fn = {"name": "add", "arguments": args}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": fn}],
    }


def test_chat_invalid_call_then_answered_call_is_a_recovery() -> None:
    bad = ToolCallRequest(name="add", arguments='{"a": 1}', id="c1")
    good = ToolCallRequest(name="add", arguments='{"a": 1, "b": 2}', id="c2")
    rig = make_rig([Reply(tool_calls=(bad,)), Reply(tool_calls=(good,)), Reply.say("3")])
    client = budgeted(rig.openai(), rig.controller)
    history: list[dict[str, Any]] = [{"role": "user", "content": "1+2?"}]
    with rig.controller.episode() as ep:
        client.chat.completions.create(model="gpt-4o", messages=history, tools=CHAT_TOOLS)
        assert [m.call_id for m in ep.mistakes] == ["c1"]
        history += [
            assistant_call("c1", '{"a": 1}'),
            {"role": "tool", "tool_call_id": "c1", "content": "error: b is missing"},
        ]
        client.chat.completions.create(model="gpt-4o", messages=history, tools=CHAT_TOOLS)
        assert ep.recoveries == []  # c1's outcome was the mistake; no success yet
        history += [assistant_call("c2", '{"a": 1, "b": 2}')]
        history += [{"role": "tool", "tool_call_id": "c2", "content": "3"}]
        client.chat.completions.create(model="gpt-4o", messages=history, tools=CHAT_TOOLS)
        client.chat.completions.create(model="gpt-4o", messages=history, tools=CHAT_TOOLS)
        ep.finish(True)
    assert ep.result is not None
    assert len(ep.result.mistakes) == 1 and len(ep.result.recoveries) == 1
    assert ep.result.recoveries[0].recovered == (ep.result.mistakes[0].id,)
    assert [s.ok for s in ep.steps] == [False, True]  # the resent history counts once


def test_calls_run_through_tool_call_are_not_counted_twice() -> None:
    rig = make_rig([Reply(tool_calls=(ToolCallRequest(name="add", arguments="{}", id="c1"),))] * 2)
    client = budgeted(rig.openai(), rig.controller)
    history: list[dict[str, Any]] = [{"role": "user", "content": "1+2?"}]
    with rig.controller.episode() as ep:
        client.chat.completions.create(model="gpt-4o", messages=history)  # no tools: no check
        with ep.tool_call("add", "c1") as call:
            call.succeed(3)
        history += [
            assistant_call("c1", "{}"),
            {"role": "tool", "tool_call_id": "c1", "content": "3"},
        ]
        client.chat.completions.create(model="gpt-4o", messages=history)
    assert [s.ok for s in ep.steps] == [True]


def test_responses_function_call_outputs_are_successes() -> None:
    rig = make_rig([Reply.say("ok"), Reply.say("ok")])
    client = budgeted(rig.openai(), rig.controller)
    with rig.controller.episode() as ep:
        ep.record_mistake("invalid_tool_arguments", call_id="r0")
        items: list[dict[str, Any]] = [
            {"role": "user", "content": "go"},
            {"type": "function_call", "call_id": "r1", "name": "add", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "r1", "output": "3"},
        ]
        client.responses.create(model="gpt-4o", input=items)
    assert len(ep.recoveries) == 1


def test_anthropic_error_result_then_success_is_a_recovery() -> None:
    rig = make_rig([Reply.say("a"), Reply.say("b")])
    client = budgeted_anthropic(rig.anthropic(), rig.controller)

    def exchange(call_id: str, *, error: bool) -> list[dict[str, Any]]:
        use = {"type": "tool_use", "id": call_id, "name": "add", "input": {}}
        result = {"type": "tool_result", "tool_use_id": call_id, "content": json.dumps(3)}
        if error:
            result = {**result, "content": "boom", "is_error": True}
        return [{"role": "assistant", "content": [use]}, {"role": "user", "content": [result]}]

    history: list[dict[str, Any]] = [{"role": "user", "content": "1+2?"}]
    kw: dict[str, Any] = {"model": ANTHROPIC_MODEL, "max_tokens": 64, "tools": ANTHROPIC_TOOLS}
    with rig.controller.episode() as ep:
        history += exchange("t1", error=True)
        client.messages.create(messages=history, **kw)
        history += exchange("t2", error=False)
        client.messages.create(messages=history, **kw)
    assert [(m.kind, m.call_id, m.detail) for m in ep.mistakes] == [("tool_error", "t1", "boom")]
    assert len(ep.recoveries) == 1
