"""Pydantic AI, unmodified, under the budget: its OpenAI chat model, ``run`` and
``run_stream``, wired by one line (the provider's client has an
:class:`AsyncBudgetTransport` as its ``http_client``'s transport)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from _integration_support import (
    Spans,
    assert_prefix_stable,
    framework,
    notices,
    observation_before_notice,
)
from budgetmix import Budget, BudgetController, BudgetExhausted, EpisodeStatus
from budgetmix.adapters.http import AsyncBudgetTransport
from budgetmix.adapters.testing import FakeLLMServer, Reply

openai = framework("openai")
pai = framework("pydantic_ai")
from pydantic_ai.models.openai import OpenAIChatModel  # noqa: E402
from pydantic_ai.providers.openai import OpenAIProvider  # noqa: E402


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def calc_agent(server: FakeLLMServer, transport: AsyncBudgetTransport) -> Any:
    client = openai.AsyncOpenAI(
        api_key="test",
        base_url=server.base_url,
        http_client=httpx.AsyncClient(transport=transport),  # the one line
        max_retries=0,
    )
    agent = pai.Agent(OpenAIChatModel("gpt-4o", provider=OpenAIProvider(openai_client=client)))
    agent.tool_plain(add)
    return agent


async def run(agent: Any, task: str, streamed: bool) -> str:
    if not streamed:
        return str((await agent.run(task)).output)
    async with agent.run_stream(task) as result:
        return str(await result.get_output())


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_stream"])
async def test_a_tool_run_is_budgeted_noticed_and_traced(
    server: FakeLLMServer, spans: Spans, streamed: bool
) -> None:
    server.push(Reply.call("add", {"a": 1, "b": 2}), Reply.say("3"))
    controller = BudgetController(Budget(turns=3), tracer_provider=spans.provider)
    agent = calc_agent(server, AsyncBudgetTransport(None, controller))
    async with controller.episode() as ep:
        output = await run(agent, "what is 1+2?", streamed)
        ep.finish(True, output)
    assert output == "3"
    assert ep.result is not None and ep.result.used["turns"] == 2
    assert notices(server)[1] == "Budget (v1): turn 2 of 3, 2 turns left including this one."
    bodies = [r.json for r in server.model_requests()]
    assert [observation_before_notice(b) for b in bodies] == ["user", "tool"]
    assert all(b.get("stream", False) is streamed for b in bodies)
    assert_prefix_stable(server)
    (tool_span,) = spans.named("execute_tool")
    assert tool_span.attributes["gen_ai.tool.name"] == "add"


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_stream"])
async def test_exhaustion_raises_budget_exhausted(server: FakeLLMServer, streamed: bool) -> None:
    server.push(*[Reply.call("add", {"a": 1, "b": 2})] * 5)
    controller = BudgetController(Budget(turns=2))
    agent = calc_agent(server, AsyncBudgetTransport(None, controller))
    async with controller.episode() as ep:
        with pytest.raises(BudgetExhausted):
            await run(agent, "loop forever", streamed)
    assert len(server.model_requests()) == 2
    assert ep.result is not None and ep.result.status is EpisodeStatus.BUDGET_EXHAUSTED
    assert ep.result.stop_reason == "turns"


async def test_invalid_tool_arguments_are_a_mistake_and_the_retry_a_recovery(
    server: FakeLLMServer,
) -> None:
    server.push(
        Reply.call("add", {"a": "one", "b": 2}), Reply.call("add", {"a": 1, "b": 2}), Reply.say("3")
    )
    controller = BudgetController(Budget(turns=4))
    agent = calc_agent(server, AsyncBudgetTransport(None, controller))
    async with controller.episode() as ep:
        output = await run(agent, "what is 1+2?", streamed=False)
    assert output == "3"  # Pydantic AI sent its validation error back and the model retried
    assert ep.result is not None
    assert [(str(m.kind), m.tool) for m in ep.result.mistakes] == [
        ("invalid_tool_arguments", "add")
    ]
    assert len(ep.result.recoveries) == 1


async def test_an_owned_episode_without_a_with_block(server: FakeLLMServer) -> None:
    server.push(Reply.call("add", {"a": 1, "b": 2}), Reply.say("3"))
    controller = BudgetController(Budget(turns=3))
    transport = AsyncBudgetTransport(None, controller)
    result = await calc_agent(server, transport).run("what is 1+2?")
    (outcome,) = transport.finish(success=True)
    assert result.output == "3" and outcome.used["turns"] == 2 and outcome.success


async def test_concurrent_runs_keep_separate_budgets(server: FakeLLMServer) -> None:
    server.default = Reply.call("add", {"a": 1, "b": 2})
    controller = BudgetController(Budget(turns=2))
    agent = calc_agent(server, AsyncBudgetTransport(None, controller))

    async def one_run(turns: int) -> Any:
        async with controller.episode(budget=Budget(turns=turns)) as ep:
            with pytest.raises(BudgetExhausted):
                await agent.run("the same task")
        return ep.result

    short, long = await asyncio.gather(one_run(2), one_run(3))
    assert (short.used["turns"], long.used["turns"]) == (2, 3)
    assert len(server.model_requests()) == 5
