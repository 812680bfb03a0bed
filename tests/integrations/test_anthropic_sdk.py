"""The Anthropic SDK, unmodified, under the budget: ``messages.create``,
``messages.stream`` and the beta ``tool_runner``, wired by one line:
``budgeted(anthropic.Anthropic(...), controller)`` or an ``httpx2`` client (the SDK 2.x
client library) whose transport is the budget transport."""

from __future__ import annotations

from typing import Any

import pytest
from _integration_support import (
    Spans,
    assert_prefix_stable,
    framework,
    notices,
    observation_before_notice,
    side_by_side,
)
from budgetmix import Budget, BudgetController, BudgetExhausted, EpisodeStatus
from budgetmix.adapters import budgeted
from budgetmix.adapters.http import BudgetTransport
from budgetmix.adapters.testing import FakeLLMServer, Reply

anthropic = framework("anthropic")
httpx2 = framework("httpx2")

MODEL = "claude-test"  # any name: the fake server answers it
WIRINGS = ["budgeted", "transport"]
TOOLS = [
    {
        "name": "add",
        "description": "Add two integers.",
        "input_schema": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    }
]


def client_for(server: FakeLLMServer, controller: BudgetController, wiring: str) -> Any:
    if wiring == "budgeted":
        return budgeted(anthropic.Anthropic(api_key="test", base_url=server.root_url), controller)
    return anthropic.Anthropic(
        api_key="test",
        base_url=server.root_url,
        http_client=httpx2.Client(transport=BudgetTransport(None, controller)),
        max_retries=0,
    )


def agent_loop(client: Any, turns: int, *, stream: bool) -> list[Any]:
    """A plain tool loop, as the SDK's documentation writes it."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "what is 1+2?"}]
    replies = []
    for _ in range(turns):
        kwargs = {"model": MODEL, "max_tokens": 256, "messages": messages, "tools": TOOLS}
        if stream:
            with client.messages.stream(**kwargs) as events:
                reply = events.get_final_message()
        else:
            reply = client.messages.create(**kwargs)
        replies.append(reply)
        calls = [block for block in reply.content if block.type == "tool_use"]
        if not calls:
            break
        messages.append({"role": "assistant", "content": [b.model_dump() for b in reply.content]})
        results = [
            {"type": "tool_result", "tool_use_id": c.id, "content": str(sum(c.input.values()))}
            for c in calls
        ]
        messages.append({"role": "user", "content": results})
    return replies


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
@pytest.mark.parametrize("wiring", WIRINGS)
def test_messages_are_budgeted_noticed_and_traced(
    server: FakeLLMServer, spans: Spans, wiring: str, stream: bool
) -> None:
    server.push(Reply.call("add", {"a": 1, "b": 2}), Reply.say("3"))
    controller = BudgetController(Budget(turns=3), tracer_provider=spans.provider)
    with controller.episode() as ep:
        replies = agent_loop(client_for(server, controller, wiring), 3, stream=stream)
    assert replies[-1].content[0].text == "3"
    assert ep.result is not None and ep.result.used["turns"] == 2
    assert notices(server) == [
        "Budget (v1): turn 1 of 3, 3 turns left including this one.",
        "Budget (v1): turn 2 of 3, 2 turns left including this one.",
    ]
    bodies = [r.json for r in server.model_requests()]
    assert observation_before_notice(bodies[1]) == "tool"  # a text block after tool_result
    assert all(b.get("stream", False) is stream for b in bodies)
    assert_prefix_stable(server)
    (tool_span,) = spans.named("execute_tool")
    assert tool_span.attributes["gen_ai.tool.name"] == "add"


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
@pytest.mark.parametrize("wiring", WIRINGS)
def test_exhaustion_raises_budget_exhausted(
    server: FakeLLMServer, wiring: str, stream: bool
) -> None:
    server.default = Reply.call("add", {"a": 1, "b": 2})
    controller = BudgetController(Budget(turns=2))
    client = client_for(server, controller, wiring)
    with controller.episode() as ep:
        with pytest.raises(BudgetExhausted) as info:
            agent_loop(client, 10, stream=stream)
        raise info.value  # unhandled: the episode ends on the budget
    assert len(server.model_requests()) == 2
    assert ep.result is not None and ep.result.status is EpisodeStatus.BUDGET_EXHAUSTED
    assert ep.result.stop_reason == "turns"


def test_an_is_error_tool_result_is_a_mistake(server: FakeLLMServer) -> None:
    server.push(Reply.call("add", {"a": 1, "b": 2}), Reply.say("3"))
    controller = BudgetController(Budget(turns=3))
    client = client_for(server, controller, "transport")
    messages: list[dict[str, Any]] = [{"role": "user", "content": "what is 1+2?"}]
    with controller.episode() as ep:
        reply = client.messages.create(model=MODEL, max_tokens=64, messages=messages, tools=TOOLS)
        (call,) = [b for b in reply.content if b.type == "tool_use"]
        failed = {"type": "tool_result", "tool_use_id": call.id, "is_error": True, "content": "no"}
        messages += [
            {"role": "assistant", "content": [b.model_dump() for b in reply.content]},
            {"role": "user", "content": [failed]},
        ]
        client.messages.create(model=MODEL, max_tokens=64, messages=messages, tools=TOOLS)
    assert ep.result is not None
    assert [(str(m.kind), m.call_id) for m in ep.result.mistakes] == [("tool_error", call.id)]


@pytest.mark.parametrize("wiring", WIRINGS)
def test_the_beta_tool_runner_runs_under_the_budget(server: FakeLLMServer, wiring: str) -> None:
    server.default = Reply.call("add", {"a": 1, "b": 2})

    @anthropic.beta_tool
    def add(a: int, b: int) -> str:
        """Add two integers."""
        return str(a + b)

    controller = BudgetController(Budget(turns=2))
    client = client_for(server, controller, wiring)
    with controller.episode() as ep, pytest.raises(BudgetExhausted):
        runner = client.beta.messages.tool_runner(
            model=MODEL, max_tokens=64, tools=[add], messages=[{"role": "user", "content": "go"}]
        )
        for _ in runner:
            pass
    assert len(server.model_requests()) == 2
    assert ep.result is not None and ep.result.used["turns"] == 2


@pytest.mark.parametrize("wiring", WIRINGS)
def test_concurrent_runs_in_threads_keep_separate_budgets(
    server: FakeLLMServer, wiring: str
) -> None:
    server.default = Reply.call("add", {"a": 1, "b": 2})
    controller = BudgetController(Budget(turns=2))
    client = client_for(server, controller, wiring)  # one client, two same-prompt runs
    results: dict[int, Any] = {}

    def one_run(turns: int) -> None:
        with controller.episode(budget=Budget(turns=turns)) as ep:
            with pytest.raises(BudgetExhausted) as info:
                agent_loop(client, turns=10, stream=False)
            raise info.value  # unhandled: the episode ends on the budget
        results[turns] = ep.result

    side_by_side(one_run)
    assert {t: (r.used["turns"], r.status) for t, r in results.items()} == {
        2: (2, EpisodeStatus.BUDGET_EXHAUSTED),
        3: (3, EpisodeStatus.BUDGET_EXHAUSTED),
    }
    assert len(server.model_requests()) == 5
