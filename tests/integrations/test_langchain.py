"""LangChain's agent (``langchain.agents.create_agent``) and LangGraph's prebuilt agent
(``create_react_agent``), unmodified, under the budget: ``ChatOpenAI`` from
langchain-openai wired by one line (``http_client=`` / ``http_async_client=`` an httpx
client whose transport is the budget transport)."""

from __future__ import annotations

import warnings
from typing import Any

import httpx
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
from budgetmix.adapters.http import AsyncBudgetTransport, BudgetTransport
from budgetmix.adapters.testing import FakeLLMServer, Reply

framework("langchain_openai")
framework("langgraph")
from langchain.agents import create_agent  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402

with warnings.catch_warnings():  # moved to langchain.agents; the prebuilt agent stays tested
    warnings.simplefilter("ignore")
    from langgraph.prebuilt import create_react_agent


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def chat_model(server: FakeLLMServer, controller: BudgetController, *, streaming: bool) -> Any:
    return ChatOpenAI(
        model="gpt-4o",
        base_url=server.base_url,
        api_key="test",
        max_retries=0,
        streaming=streaming,
        http_client=httpx.Client(transport=BudgetTransport(None, controller)),  # the one line
        http_async_client=httpx.AsyncClient(transport=AsyncBudgetTransport(None, controller)),
    )


def task(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


@pytest.mark.parametrize("streaming", [False, True], ids=["invoke", "streamed"])
def test_langchain_agent_is_budgeted_noticed_and_traced(
    server: FakeLLMServer, spans: Spans, streaming: bool
) -> None:
    server.push(Reply.call("add", {"a": 1, "b": 2}), Reply.say("3"))
    controller = BudgetController(Budget(turns=4), tracer_provider=spans.provider)
    agent = create_agent(chat_model(server, controller, streaming=streaming), [add])
    with controller.episode() as ep:
        out = agent.invoke(task("what is 1+2?"))
        ep.finish(True, out["messages"][-1].content)
    assert out["messages"][-1].content == "3"
    assert ep.result is not None and ep.result.used["turns"] == 2
    assert notices(server)[1] == "Budget (v1): turn 2 of 4, 3 turns left including this one."
    bodies = [r.json for r in server.model_requests()]
    assert [observation_before_notice(b) for b in bodies] == ["user", "tool"]
    assert all(b.get("stream", False) is streaming for b in bodies)
    assert_prefix_stable(server)
    (tool_span,) = spans.named("execute_tool")
    assert tool_span.attributes["gen_ai.tool.name"] == "add"


async def test_langgraph_prebuilt_agent_async_exhaustion(server: FakeLLMServer) -> None:
    server.push(*[Reply.call("add", {"a": 1, "b": 2})] * 5)
    controller = BudgetController(Budget(turns=2))
    agent = create_react_agent(chat_model(server, controller, streaming=False), [add])
    async with controller.episode() as ep:
        with pytest.raises(BudgetExhausted):
            await agent.ainvoke(task("loop forever"))
    assert len(server.model_requests()) == 2
    assert ep.result is not None and ep.result.status is EpisodeStatus.BUDGET_EXHAUSTED
    assert ep.result.stop_reason == "turns"


def test_an_unknown_tool_is_a_mistake_and_the_agent_recovers(server: FakeLLMServer) -> None:
    server.push(
        Reply.call("subtract", {"a": 1, "b": 2}),
        Reply.call("add", {"a": 1, "b": 2}),
        Reply.say("3"),
    )
    controller = BudgetController(Budget(turns=4))
    agent = create_react_agent(chat_model(server, controller, streaming=False), [add])
    with controller.episode() as ep:
        out = agent.invoke(task("what is 1+2?"))
    assert out["messages"][-1].content == "3"  # LangGraph told the model and it retried
    assert ep.result is not None
    assert [(str(m.kind), m.tool) for m in ep.result.mistakes] == [("unknown_tool", "subtract")]
    assert len(ep.result.recoveries) == 1


def test_concurrent_runs_in_threads_keep_separate_budgets(server: FakeLLMServer) -> None:
    server.default = Reply.call("add", {"a": 1, "b": 2})
    controller = BudgetController(Budget(turns=2))
    agent = create_agent(chat_model(server, controller, streaming=False), [add])
    results: dict[int, Any] = {}

    def one_run(turns: int) -> None:
        # an unexpected outcome raises here: no result, and the assert below fails
        with controller.episode(budget=Budget(turns=turns)) as ep, pytest.raises(BudgetExhausted):
            agent.invoke(task("the same task"))
        results[turns] = ep.result

    side_by_side(one_run)
    assert {t: r.used["turns"] for t, r in results.items()} == {2: 2, 3: 3}
    assert len(server.model_requests()) == 5
