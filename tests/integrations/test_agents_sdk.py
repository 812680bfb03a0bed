"""The OpenAI Agents SDK, unmodified, under the budget: its Chat Completions and
Responses models, ``Runner.run`` and ``Runner.run_streamed``, wired by one line: the
client it is given is ``budgeted(AsyncOpenAI(...), controller)`` or an ``AsyncOpenAI``
whose ``http_client`` has an :class:`AsyncBudgetTransport`."""

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
from budgetmix.adapters import budgeted
from budgetmix.adapters.http import AsyncBudgetTransport
from budgetmix.adapters.testing import FakeLLMServer, Reply

openai = framework("openai")
agents = framework("agents")
agents.set_tracing_disabled(True)  # its exporter would try to reach api.openai.com

MODELS = ["chat", "responses"]
WIRINGS = ["transport", "budgeted"]


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def client_for(
    server: FakeLLMServer, controller: BudgetController, wiring: str, **transport: Any
) -> Any:
    if wiring == "budgeted":  # the one line: budgeted(client, controller)
        return budgeted(openai.AsyncOpenAI(api_key="test", base_url=server.base_url), controller)
    return openai.AsyncOpenAI(  # the one line: http_client=... with the budget transport
        api_key="test",
        base_url=server.base_url,
        http_client=httpx.AsyncClient(
            transport=AsyncBudgetTransport(None, controller, **transport)
        ),
        max_retries=0,  # the transport retries under the controller's policy
    )


def calc_agent(client: Any, model: str) -> Any:
    cls = agents.OpenAIResponsesModel if model == "responses" else agents.OpenAIChatCompletionsModel
    return agents.Agent(
        name="calc",
        instructions="Use the tool.",
        tools=[agents.function_tool(add)],
        model=cls(model="gpt-4o", openai_client=client),
    )


async def run(agent: Any, task: str, streamed: bool) -> Any:
    if not streamed:
        return await agents.Runner.run(agent, task)
    result = agents.Runner.run_streamed(agent, task)
    async for _ in result.stream_events():
        pass
    return result


@pytest.mark.parametrize("wiring", WIRINGS)
@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
@pytest.mark.parametrize("model", MODELS)
async def test_a_tool_run_is_budgeted_noticed_and_traced(
    server: FakeLLMServer, spans: Spans, model: str, streamed: bool, wiring: str
) -> None:
    server.push(Reply.call("add", {"a": 1, "b": 2}), Reply.say("3"))
    controller = BudgetController(Budget(turns=4), tracer_provider=spans.provider)
    agent = calc_agent(client_for(server, controller, wiring), model)
    async with controller.episode() as ep:
        result = await run(agent, "what is 1+2?", streamed)
        ep.finish(True, result.final_output)
    assert result.final_output == "3"
    assert ep.result is not None and ep.result.used["turns"] == 2
    assert ep.result.used["input_tokens"] > 0 and list(ep.result.mistakes) == []
    assert notices(server) == [
        "Budget (v1): turn 1 of 4, 4 turns left including this one.",
        "Budget (v1): turn 2 of 4, 3 turns left including this one.",
    ]
    bodies = [r.json for r in server.model_requests()]
    assert [observation_before_notice(b) for b in bodies] == ["user", "tool"]
    assert all(b.get("stream", False) is streamed for b in bodies)
    assert_prefix_stable(server)
    assert [s.name for s in spans.named("chat")] == ["chat gpt-4o"] * 2
    (tool_span,) = spans.named("execute_tool")
    assert tool_span.attributes["gen_ai.tool.name"] == "add"


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
@pytest.mark.parametrize("model", MODELS)
async def test_exhaustion_raises_budget_exhausted_before_the_third_request(
    server: FakeLLMServer, model: str, streamed: bool
) -> None:
    server.push(*[Reply.call("add", {"a": 1, "b": 2})] * 5)
    controller = BudgetController(Budget(turns=2))
    agent = calc_agent(client_for(server, controller, "transport"), model)
    async with controller.episode() as ep:
        with pytest.raises(BudgetExhausted) as info:
            await run(agent, "loop forever", streamed)
    assert info.value.dimension == "turns"
    assert len(server.model_requests()) == 2  # the refused third call never left
    assert ep.result is not None and ep.result.status is EpisodeStatus.BUDGET_EXHAUSTED
    assert ep.result.stop_reason == "turns"


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
@pytest.mark.parametrize("model", MODELS)
async def test_respond_mode_gives_a_final_answer_streamed_or_not(
    server: FakeLLMServer, model: str, streamed: bool
) -> None:
    server.push(*[Reply.call("add", {"a": 1, "b": 2})] * 5)
    controller = BudgetController(Budget(turns=2))
    client = client_for(server, controller, "transport", on_exhausted="respond")
    async with controller.episode() as ep:
        result = await run(calc_agent(client, model), "loop forever", streamed)
    assert "budget exhausted on turns" in result.final_output
    assert len(server.model_requests()) == 2
    assert ep.result is not None and ep.result.status is EpisodeStatus.BUDGET_EXHAUSTED


@pytest.mark.parametrize("model", MODELS)
async def test_an_unknown_tool_call_is_a_mistake(server: FakeLLMServer, model: str) -> None:
    server.push(Reply.call("subtract", {"a": 1, "b": 2}), Reply.say("3"))
    controller = BudgetController(Budget(turns=4))
    agent = calc_agent(client_for(server, controller, "transport"), model)
    async with controller.episode() as ep:
        with pytest.raises(agents.exceptions.ModelBehaviorError, match="subtract"):
            await agents.Runner.run(agent, "what is 1+2?")  # the SDK ends the run
    assert ep.result is not None
    assert [(str(m.kind), m.tool) for m in ep.result.mistakes] == [("unknown_tool", "subtract")]


@pytest.mark.parametrize("model", MODELS)
async def test_concurrent_runs_keep_separate_budgets(server: FakeLLMServer, model: str) -> None:
    server.default = Reply.call("add", {"a": 1, "b": 2})  # both agents loop until refused
    controller = BudgetController(Budget(turns=2))
    agent = calc_agent(client_for(server, controller, "transport"), model)

    async def one_run(turns: int) -> Any:
        async with controller.episode(budget=Budget(turns=turns)) as ep:
            with pytest.raises(BudgetExhausted):
                await agents.Runner.run(agent, "the same task")
        return ep.result

    short, long = await asyncio.gather(one_run(2), one_run(3))
    assert (short.used["turns"], long.used["turns"]) == (2, 3)
    seen = notices(server)
    assert sum("of 2" in n for n in seen) == 2 and sum("of 3" in n for n in seen) == 3
    assert len(seen) == 5


@pytest.mark.parametrize("model", MODELS)
async def test_a_grace_turn_gives_a_tool_less_final_answer(
    server: FakeLLMServer, model: str
) -> None:
    server.push(*[Reply.call("add", {"a": 1, "b": 2})] * 2, Reply.say("wrap-up"))
    controller = BudgetController(Budget(turns=2), exhaustion="grace")
    agent = calc_agent(client_for(server, controller, "transport"), model)
    async with controller.episode() as ep:
        result = await agents.Runner.run(agent, "loop forever")
    assert result.final_output == "wrap-up"
    requests = [r.json for r in server.model_requests()]
    assert len(requests) == 3  # T + 1: the grace turn
    assert requests[-1].get("tool_choice") == "none" and "tool_choice" not in requests[0]
    assert ep.result is not None and ep.result.grace_turn
    assert ep.result.status is EpisodeStatus.BUDGET_EXHAUSTED and ep.result.stop_reason == "turns"
