"""MCP tools under the budget: a real MCP server (the official SDK's, over stdio in a
subprocess) called through ``budgeted_session(session, controller)``."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from _integration_support import Spans, framework
from budgetmix import Budget, BudgetController, BudgetExhausted, ConfigError, EpisodeStatus
from budgetmix.adapters.mcp import budgeted_session

mcp = framework("mcp")
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

SERVER = Path(__file__).with_name("_mcp_server.py")


@asynccontextmanager
async def mcp_session(tmp_path: Path) -> AsyncIterator[Any]:
    """A started session with the test server; the server logs each tool it runs."""
    params = StdioServerParameters(
        command=sys.executable, args=[str(SERVER), str(tmp_path / "ran.log")]
    )
    with open(os.devnull, "w") as errlog:  # the server logs tracebacks of failing tools
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            mcp.ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


def ran(tmp_path: Path) -> list[str]:
    log = tmp_path / "ran.log"
    return log.read_text().split() if log.exists() else []


async def test_tool_calls_are_counted_with_spans_and_steps(tmp_path: Path, spans: Spans) -> None:
    controller = BudgetController(Budget(turns=10, tool_calls=5), tracer_provider=spans.provider)
    async with mcp_session(tmp_path) as raw:
        session = budgeted_session(raw, controller)
        async with controller.episode() as ep:
            first = await session.call_tool("add", {"a": 1, "b": 2})
            second = await session.call_tool("add", {"a": 3, "b": 4})
            ep.finish(True)
    assert [first.content[0].text, second.content[0].text] == ["3", "7"]
    assert ep.result is not None and ep.result.used["tool_calls"] == 2
    assert list(ep.result.mistakes) == [] and ran(tmp_path) == ["add", "add"]
    tool_spans = spans.named("execute_tool")
    assert [s.name for s in tool_spans] == ["execute_tool add", "execute_tool add"]
    assert all(s.attributes["gen_ai.tool.name"] == "add" for s in tool_spans)
    assert all("error.type" not in s.attributes for s in tool_spans)
    # content is off by default: neither arguments nor results reach a span
    assert all("gen_ai.tool.call.result" not in s.attributes for s in tool_spans)
    (episode_span,) = spans.named("invoke_agent")
    assert all(s.parent is not None for s in tool_spans)
    assert {s.context.trace_id for s in tool_spans} == {episode_span.context.trace_id}


async def test_the_limit_refuses_before_the_call_reaches_the_server(tmp_path: Path) -> None:
    controller = BudgetController(Budget(turns=10, tool_calls=2))
    async with mcp_session(tmp_path) as raw:
        session = budgeted_session(raw, controller)
        async with controller.episode() as ep:
            await session.call_tool("add", {"a": 1, "b": 1})
            await session.call_tool("add", {"a": 1, "b": 1})
            with pytest.raises(BudgetExhausted) as info:
                await session.call_tool("add", {"a": 1, "b": 1})
            assert info.value.dimension == "tool_calls"
            raise info.value  # unhandled: the episode ends as the budget says
    assert ran(tmp_path) == ["add", "add"]  # the third call never left
    assert ep.result is not None and ep.result.status is EpisodeStatus.BUDGET_EXHAUSTED
    assert ep.result.stop_reason == "tool_calls" and ep.result.used["tool_calls"] == 2


async def test_failed_tools_are_mistakes_of_the_sdk_kinds(tmp_path: Path, spans: Spans) -> None:
    controller = BudgetController(Budget(turns=10, tool_calls=10), tracer_provider=spans.provider)
    async with mcp_session(tmp_path) as raw:
        session = budgeted_session(raw, controller)
        async with controller.episode() as ep:
            # before the tools are listed, the server's is_error is all there is to go by
            unlisted = await session.call_tool("nope", {})
            await session.list_tools()
            raised = await session.call_tool("divide", {"a": 1, "b": 0})
            unknown = await session.call_tool("nope", {})
            invalid = await session.call_tool("add", {"a": "x"})
            recovered = await session.call_tool("divide", {"a": 6, "b": 3})
            ep.finish(True)
    assert [r.is_error for r in (unlisted, raised, unknown, invalid, recovered)] == [
        True, True, True, True, False
    ]  # fmt: skip
    assert ep.result is not None
    kinds = [(str(m.kind), m.tool) for m in ep.result.mistakes]
    assert kinds == [
        ("tool_error", "nope"),
        ("tool_error", "divide"),
        ("unknown_tool", "nope"),
        ("invalid_tool_arguments", "add"),
    ]
    assert "Error executing tool divide" in ep.result.mistakes[1].detail
    (recovery,) = ep.result.recoveries
    assert recovery.recovered == tuple(m.id for m in ep.result.mistakes)
    assert ran(tmp_path) == ["divide", "divide"]  # unknown and invalid calls ran nothing
    errors = [s.attributes.get("error.type") for s in spans.named("execute_tool")]
    assert errors == ["tool_error", "tool_error", "unknown_tool", "invalid_tool_arguments", None]


async def test_a_call_outside_an_episode_is_refused_not_sent(tmp_path: Path) -> None:
    controller = BudgetController(Budget(turns=10, tool_calls=2))
    async with mcp_session(tmp_path) as raw:
        session = budgeted_session(raw, controller)
        with pytest.raises(ConfigError, match="outside an episode"):
            await session.call_tool("add", {"a": 1, "b": 2})
        # the rest of the session is the SDK's own
        listed = await session.list_tools()
    assert {t.name for t in listed.tools} == {"add", "divide"}
    assert ran(tmp_path) == []


async def test_concurrent_episodes_keep_separate_tool_budgets(tmp_path: Path) -> None:
    controller = BudgetController(Budget(turns=10, tool_calls=2))

    async def agent(session: Any, calls: int) -> Any:
        async with controller.episode() as ep:
            for _ in range(calls):
                await session.call_tool("add", {"a": 1, "b": 1})
                await asyncio.sleep(0)  # interleave the two agents
        return ep.result

    async with mcp_session(tmp_path) as raw:
        session = budgeted_session(raw, controller)
        one, two = await asyncio.gather(agent(session, 2), agent(session, 3))
    assert one.used["tool_calls"] == 2 and one.status is not EpisodeStatus.BUDGET_EXHAUSTED
    assert two.used["tool_calls"] == 2 and two.status is EpisodeStatus.BUDGET_EXHAUSTED
    assert ran(tmp_path) == ["add"] * 4


def test_a_session_without_call_tool_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="call_tool"):
        budgeted_session(object(), None)
    with pytest.raises(ConfigError, match="target"):
        budgeted_session(mcp.ClientSession, "controller")  # type: ignore[arg-type]


async def test_a_framework_calling_mcp_tools_records_each_call_once(
    tmp_path: Path, server: Any, spans: Spans
) -> None:
    """The OpenAI Agents SDK with an MCP server, over the budget transport: the session
    line records each MCP call exactly (under the model's call id), the wire adds no
    second span and no second mistake."""
    agents = framework("agents")
    httpx = framework("httpx")
    openai = framework("openai")
    from budgetmix.adapters.http import AsyncBudgetTransport
    from budgetmix.adapters.testing import Reply

    agents.set_tracing_disabled(True)
    server.push(
        Reply.call("add", {"a": 1, "b": 2}), Reply.call("divide", {"a": 1, "b": 0}), Reply.say("3")
    )
    controller = BudgetController(Budget(turns=4, tool_calls=4), tracer_provider=spans.provider)
    client = openai.AsyncOpenAI(
        api_key="test",
        base_url=server.base_url,
        http_client=httpx.AsyncClient(transport=AsyncBudgetTransport(None, controller)),
        max_retries=0,
    )
    params = {"command": sys.executable, "args": [str(SERVER), str(tmp_path / "ran.log")]}
    async with agents.mcp.MCPServerStdio(params=params, name="calc") as mcp_server:
        mcp_server.session = budgeted_session(mcp_server.session, controller)  # the one line
        agent = agents.Agent(
            name="calc",
            mcp_servers=[mcp_server],
            model=agents.OpenAIChatCompletionsModel(model="gpt-4o", openai_client=client),
        )
        async with controller.episode() as ep:
            result = await agents.Runner.run(agent, "what is 1+2?")
            ep.finish(True, result.final_output)
    assert result.final_output == "3" and ran(tmp_path) == ["add", "divide"]
    assert ep.result is not None and ep.result.used["tool_calls"] == 2
    assert [(str(m.kind), m.tool, m.call_id) for m in ep.result.mistakes] == [
        ("tool_error", "divide", "call_2_0")
    ]
    tool_spans = spans.named("execute_tool")
    assert [(s.name, s.attributes["gen_ai.tool.call.id"]) for s in tool_spans] == [
        ("execute_tool add", "call_1_0"),
        ("execute_tool divide", "call_2_0"),
    ]
    assert all("budgetmix.tool.timing" not in s.attributes for s in tool_spans)  # exact


async def test_an_mcp_call_the_budget_refused_is_a_budget_stop_not_a_mistake(
    tmp_path: Path, server: Any, spans: Spans
) -> None:
    """The Agents SDK sends the refused MCP call's error back to the model as the call's
    result: that result is the budget's refusal, not a failed tool; the episode ends as
    the ledger says."""
    agents = framework("agents")
    httpx = framework("httpx")
    openai = framework("openai")
    from budgetmix.adapters.http import AsyncBudgetTransport
    from budgetmix.adapters.testing import Reply

    agents.set_tracing_disabled(True)
    server.push(
        Reply.call("add", {"a": 1, "b": 2}), Reply.call("add", {"a": 3, "b": 4}), Reply.say("3")
    )
    controller = BudgetController(Budget(turns=4, tool_calls=1), tracer_provider=spans.provider)
    client = openai.AsyncOpenAI(
        api_key="test",
        base_url=server.base_url,
        http_client=httpx.AsyncClient(transport=AsyncBudgetTransport(None, controller)),
        max_retries=0,
    )
    params = {"command": sys.executable, "args": [str(SERVER), str(tmp_path / "ran.log")]}
    async with agents.mcp.MCPServerStdio(params=params, name="calc") as mcp_server:
        mcp_server.session = budgeted_session(mcp_server.session, controller)
        agent = agents.Agent(
            name="calc",
            mcp_servers=[mcp_server],
            model=agents.OpenAIChatCompletionsModel(model="gpt-4o", openai_client=client),
        )
        async with controller.episode() as ep:  # the next turn's stop ends the run
            await agents.Runner.run(agent, "what is 1+2?")
    assert ran(tmp_path) == ["add"]  # the refused call never reached the server
    assert ep.result is not None
    assert list(ep.result.mistakes) == []
    assert ep.result.status is EpisodeStatus.BUDGET_EXHAUSTED
    assert ep.result.stop_reason == "tool_calls"
