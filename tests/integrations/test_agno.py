"""Agno, unmodified, under the budget: ``OpenAIChat(http_client=httpx.AsyncClient(
transport=AsyncBudgetTransport(None, controller)))`` for ``arun`` (``httpx.Client`` with
:class:`BudgetTransport` for ``run``). Agno uses ``http_client`` only when its kind
matches the call (it logs that it ignores the other and builds its own client), so the
mismatched wiring sends unbudgeted: the episode then charges no turn, and says so."""

from __future__ import annotations

import logging

import httpx
import pytest
from _integration_support import framework
from budgetmix import Budget, BudgetController, EpisodeStatus
from budgetmix.adapters.http import AsyncBudgetTransport, BudgetTransport
from budgetmix.adapters.testing import FakeLLMServer, Reply

framework("agno")
from agno.agent import Agent  # noqa: E402
from agno.models.openai import OpenAIChat  # noqa: E402


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _agent(server: FakeLLMServer, http_client: httpx.Client | httpx.AsyncClient) -> Agent:
    model = OpenAIChat(
        id="gpt-4o",
        base_url=server.base_url,
        api_key="test",
        max_retries=0,
        http_client=http_client,
    )
    return Agent(model=model, tools=[add], telemetry=False)


async def test_an_agno_agent_holds_the_turn_limit(server: FakeLLMServer) -> None:
    server.push(*[Reply.call("add", {"a": 1, "b": 2}) for _ in range(8)])  # never done
    controller = BudgetController(Budget(turns=3))
    transport = AsyncBudgetTransport(None, controller)
    agent = _agent(server, httpx.AsyncClient(transport=transport))  # the one line
    async with controller.episode() as ep:
        run = await agent.arun("what is 1+2?")
    assert str(run.status) == "RunStatus.error" or run.status.value == "ERROR"
    assert "budget exhausted on turns" in str(run.content)  # what the caller sees
    assert len(server.model_requests()) == 3
    assert ep.result is not None and ep.result.status is EpisodeStatus.BUDGET_EXHAUSTED
    assert ep.result.stop_reason == "turns" and ep.result.used["turns"] == 3


async def test_a_sync_client_under_arun_is_not_silent(
    server: FakeLLMServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.push(Reply.say("3"))
    controller = BudgetController(Budget(turns=3))
    agent = _agent(server, httpx.Client(transport=BudgetTransport(None, controller)))
    caplog.set_level(logging.WARNING, logger="budgetmix")
    async with controller.episode(name="agno") as ep:
        await agent.arun("what is 1+2?")
    assert len(server.model_requests()) == 1  # sent, by Agno's own client
    assert ep.result is not None and ep.result.used["turns"] == 0
    (warning,) = [r for r in caplog.records if "charged no turn" in r.getMessage()]
    assert "'agno'" in warning.getMessage() and "AsyncBudgetTransport" in warning.getMessage()
