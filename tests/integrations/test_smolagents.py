"""smolagents, unmodified, under the budget: a ``ToolCallingAgent`` with its
``OpenAIServerModel`` wired by one line (``client_kwargs={"http_client": ...}`` with the
budget transport), streamed and not."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from _integration_support import (
    Spans,
    assert_prefix_stable,
    framework,
    in_chain,
    notices,
    observation_before_notice,
    side_by_side,
)
from budgetmix import Budget, BudgetController, BudgetExhausted, EpisodeStatus
from budgetmix.adapters.http import BudgetTransport
from budgetmix.adapters.testing import FakeLLMServer, Reply

smolagents = framework("smolagents")


@smolagents.tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first integer
        b: the second integer
    """
    return a + b


def calc_agent(server: FakeLLMServer, transport: BudgetTransport, *, stream: bool = False) -> Any:
    model = smolagents.OpenAIServerModel(
        model_id="gpt-4o",
        api_base=server.base_url,
        api_key="test",
        client_kwargs={"http_client": httpx.Client(transport=transport), "max_retries": 0},
    )
    return smolagents.ToolCallingAgent(
        tools=[add], model=model, max_steps=6, verbosity_level=0, stream_outputs=stream
    )


def answer(text: str) -> Reply:
    return Reply.call("final_answer", {"answer": text})


@pytest.mark.parametrize("stream", [False, True], ids=["run", "stream_outputs"])
def test_a_tool_run_is_budgeted_noticed_and_traced(
    server: FakeLLMServer, spans: Spans, stream: bool
) -> None:
    server.push(Reply.call("add", {"a": 1, "b": 2}), answer("3"))
    controller = BudgetController(Budget(turns=4), tracer_provider=spans.provider)
    agent = calc_agent(server, BudgetTransport(None, controller), stream=stream)
    with controller.episode() as ep:
        output = agent.run("what is 1+2?")
        ep.finish(True, output)
    assert str(output) == "3"
    assert ep.result is not None and ep.result.used["turns"] == 2
    assert notices(server)[1] == "Budget (v1): turn 2 of 4, 3 turns left including this one."
    bodies = [r.json for r in server.model_requests()]
    # smolagents sends tool results back as user messages ("Observation: ...")
    assert [observation_before_notice(b) for b in bodies] == ["user", "user"]
    assert bodies[1]["messages"][-2]["content"] == [{"type": "text", "text": "Observation:\n3"}]
    assert all(b.get("stream", False) is stream for b in bodies)
    assert_prefix_stable(server)
    assert [s.attributes["gen_ai.tool.name"] for s in spans.named("execute_tool")][:1] == ["add"]


def test_exhaustion_wrapped_by_the_framework_still_ends_the_episode_on_budget(
    server: FakeLLMServer,
) -> None:
    server.default = Reply.call("add", {"a": 1, "b": 2})
    controller = BudgetController(Budget(turns=2))
    agent = calc_agent(server, BudgetTransport(None, controller))
    with pytest.raises(smolagents.utils.AgentGenerationError) as info:  # noqa: SIM117
        with controller.episode() as ep:  # the episode sees the framework's wrapper
            agent.run("loop forever")
    assert in_chain(info.value, BudgetExhausted)  # smolagents wraps it
    assert len(server.model_requests()) == 2
    assert ep.result is not None and ep.result.status is EpisodeStatus.BUDGET_EXHAUSTED
    assert ep.result.stop_reason == "turns"


def test_unknown_tools_are_mistakes(server: FakeLLMServer) -> None:
    server.push(Reply.call("subtract", {"a": 1, "b": 2}), Reply.call("add", {"a": 1, "b": 2}))
    server.push(answer("3"))
    controller = BudgetController(Budget(turns=5))
    agent = calc_agent(server, BudgetTransport(None, controller))
    with controller.episode() as ep:
        output = agent.run("what is 1+2?")
    assert str(output) == "3"
    assert ep.result is not None
    assert [(str(m.kind), m.tool) for m in ep.result.mistakes] == [("unknown_tool", "subtract")]


def test_a_rewritten_first_message_stays_one_conversation(server: FakeLLMServer) -> None:
    """No episode bound: the transport keeps one budget although smolagents rewrites its
    history after each error (issue 16 item 2: 21 requests under a 3-turn budget)."""
    server.default = Reply.call("subtract", {"a": 1, "b": 2})  # an error every step
    controller = BudgetController(Budget(turns=3))
    transport = BudgetTransport(None, controller)
    agent = calc_agent(server, transport)
    with pytest.raises(smolagents.utils.AgentGenerationError) as info:
        agent.run("loop forever")
    assert in_chain(info.value, BudgetExhausted)
    assert len(server.model_requests()) <= 3
    results = transport.finish()
    assert [r.status for r in results] == [EpisodeStatus.BUDGET_EXHAUSTED]


def test_concurrent_runs_in_threads_keep_separate_budgets(server: FakeLLMServer) -> None:
    server.default = Reply.call("add", {"a": 1, "b": 2})
    controller = BudgetController(Budget(turns=2))
    transport = BudgetTransport(None, controller)  # one transport, one model, two agents
    results: dict[int, Any] = {}

    def one_run(turns: int) -> None:
        agent = calc_agent(server, transport)
        with pytest.raises(smolagents.utils.AgentGenerationError):  # noqa: SIM117
            with controller.episode(budget=Budget(turns=turns)) as ep:
                agent.run("the same task")
        results[turns] = ep.result

    side_by_side(one_run)
    assert {t: (r.used["turns"], r.status) for t, r in results.items()} == {
        2: (2, EpisodeStatus.BUDGET_EXHAUSTED),
        3: (3, EpisodeStatus.BUDGET_EXHAUSTED),
    }
    assert len(server.model_requests()) == 5
