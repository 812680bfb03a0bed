"""Budgets for agent frameworks without touching their code: the OpenAI Agents SDK and
Pydantic AI run against the loopback fake LLM server through our httpx transport."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from budgetmix import Budget, BudgetController, BudgetExhausted, EpisodeStatus
from budgetmix.adapters.http import AsyncBudgetTransport
from budgetmix.adapters.testing import FakeLLMServer, Reply

pytestmark = pytest.mark.frameworks
openai = pytest.importorskip("openai")


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as s:
        yield s


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def client_for(server: FakeLLMServer, transport: AsyncBudgetTransport) -> Any:
    # max_retries=0: the transport retries transient errors under our policy
    return openai.AsyncOpenAI(
        api_key="test",
        base_url=server.base_url,
        http_client=httpx.AsyncClient(transport=transport),
        max_retries=0,
    )


def notices(server: FakeLLMServer) -> list[str]:
    out = []
    for r in server.model_requests():
        body = r.json
        last = body["messages"][-1] if "messages" in body else body["input"][-1]
        out.append(str(last["content"]))
    return out


# -- OpenAI Agents SDK -----------------------------------------------------------------
@pytest.fixture
def agents() -> Any:
    mod = pytest.importorskip("agents")
    mod.set_tracing_disabled(True)  # its exporter would try to reach api.openai.com
    return mod


def agents_agent(agents: Any, client: Any, *, responses: bool = False) -> Any:
    model_cls = agents.OpenAIResponsesModel if responses else agents.OpenAIChatCompletionsModel
    return agents.Agent(
        name="calc",
        instructions="Use the tool.",
        tools=[agents.function_tool(add)],
        model=model_cls(model="gpt-4o", openai_client=client),
    )


@pytest.mark.parametrize("responses", [False, True], ids=["chat", "responses"])
async def test_agents_sdk_runs_under_our_budget(
    agents: Any, server: FakeLLMServer, responses: bool
) -> None:
    server.push(Reply.call("add", {"a": 1, "b": 2}), Reply.say("3"))
    controller = BudgetController(Budget(turns=4))
    agent = agents_agent(
        agents, client_for(server, AsyncBudgetTransport(None, controller)), responses=responses
    )
    async with controller.episode() as ep:
        result = await agents.Runner.run(agent, "what is 1+2?")
        ep.finish(True, result.final_output)
    assert result.final_output == "3"
    assert ep.result is not None and ep.result.used["turns"] == 2
    assert ep.result.used["input_tokens"] > 0 and list(ep.result.mistakes) == []
    assert notices(server) == [
        "Budget (v1): turn 1 of 4, 4 turns left including this one.",
        "Budget (v1): turn 2 of 4, 3 turns left including this one.",
    ]


async def test_agents_sdk_exhaustion_surfaces_as_budget_exhausted(
    agents: Any, server: FakeLLMServer
) -> None:
    server.push(*[Reply.call("add", {"a": 1, "b": 2})] * 5)
    controller = BudgetController(Budget(turns=2))
    agent = agents_agent(agents, client_for(server, AsyncBudgetTransport(None, controller)))
    async with controller.episode() as ep:
        with pytest.raises(BudgetExhausted) as info:
            await agents.Runner.run(agent, "loop forever")
    assert info.value.dimension == "turns"
    assert len(server.model_requests()) == 2  # the refused third call never left
    assert ep.result is not None and ep.result.status is EpisodeStatus.BUDGET_EXHAUSTED


async def test_agents_sdk_gets_a_clean_final_answer_in_respond_mode(
    agents: Any, server: FakeLLMServer
) -> None:
    server.push(*[Reply.call("add", {"a": 1, "b": 2})] * 5)
    controller = BudgetController(Budget(turns=2))
    transport = AsyncBudgetTransport(None, controller, on_exhausted="respond")
    agent = agents_agent(agents, client_for(server, transport))
    async with controller.episode() as ep:
        result = await agents.Runner.run(agent, "loop forever")
    assert "budget exhausted on turns" in result.final_output
    assert len(server.model_requests()) == 2
    assert ep.result is not None and ep.result.status is EpisodeStatus.BUDGET_EXHAUSTED


# -- Pydantic AI -----------------------------------------------------------------------
def pydantic_agent(server: FakeLLMServer, transport: AsyncBudgetTransport) -> Any:
    pai = pytest.importorskip("pydantic_ai")
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(openai_client=client_for(server, transport))
    agent = pai.Agent(OpenAIChatModel("gpt-4o", provider=provider))
    agent.tool_plain(add)
    return agent


async def test_pydantic_ai_runs_under_our_budget(server: FakeLLMServer) -> None:
    server.push(Reply.call("add", {"a": 1, "b": 2}), Reply.say("3"))
    controller = BudgetController(Budget(turns=3))
    agent = pydantic_agent(server, AsyncBudgetTransport(None, controller))
    async with controller.episode() as ep:
        result = await agent.run("what is 1+2?")
        ep.finish(True, result.output)
    assert result.output == "3"
    assert ep.result is not None and ep.result.used["turns"] == 2
    assert notices(server)[1] == "Budget (v1): turn 2 of 3, 2 turns left including this one."


async def test_pydantic_ai_exhaustion_surfaces_as_budget_exhausted(server: FakeLLMServer) -> None:
    server.push(*[Reply.call("add", {"a": 1, "b": 2})] * 5)
    controller = BudgetController(Budget(turns=2))
    agent = pydantic_agent(server, AsyncBudgetTransport(None, controller))
    async with controller.episode() as ep:
        with pytest.raises(BudgetExhausted):
            await agent.run("loop forever")
    assert len(server.model_requests()) == 2
    assert ep.result is not None and ep.result.status is EpisodeStatus.BUDGET_EXHAUSTED


async def test_pydantic_ai_owned_episode_without_a_with_block(server: FakeLLMServer) -> None:
    server.push(Reply.call("add", {"a": 1, "b": 2}), Reply.say("3"))
    controller = BudgetController(Budget(turns=3))
    transport = AsyncBudgetTransport(None, controller)
    agent = pydantic_agent(server, transport)
    result = await agent.run("what is 1+2?")
    (outcome,) = transport.finish(success=True)
    assert result.output == "3" and outcome.used["turns"] == 2 and outcome.success
