"""arun_agent: the async driver over the same loop core."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from budgetmix import Budget, EpisodeStatus, MistakeKind, current_episode
from budgetmix.adapters import (
    ChatMessage,
    FailingModel,
    ModelResponse,
    ScriptedModel,
    ToolSpec,
    arun_agent,
    final_answer,
    run_agent,
    tool_call,
    tool_calls,
)

pytestmark = pytest.mark.usefixtures("no_network")


async def fetch(key: str) -> str:
    """Fetch a value (async)."""
    await asyncio.sleep(0)
    return key.upper()


def length(text: str) -> int:
    """Length of a text (sync, runs in a thread)."""
    return len(text)


async def test_async_tools_and_sync_tools_in_one_batch() -> None:
    started: list[str] = []
    release = asyncio.Event()

    async def gate(name: str) -> str:
        """Waits until both gates are running: proves they run concurrently."""
        started.append(name)
        if len(started) == 2:
            release.set()
        await asyncio.wait_for(release.wait(), timeout=10)
        return name

    batch = tool_calls(
        tool_call("gate", {"name": "a"}),
        tool_call("gate", {"name": "b"}),
        tool_call("fetch", {"key": "k"}),
        tool_call("length", {"text": "four"}),
    )
    model = ScriptedModel([batch, final_answer("ok")])
    run = await arun_agent(model, [gate, fetch, length], "go", Budget(turns=3))
    assert run.success
    assert [m.content for m in run.messages if m.role == "tool"] == ["a", "b", "K", "4"]
    assert run.result.used["tool_calls"] == 4


async def test_async_tool_exception_then_recovery() -> None:
    async def flaky(n: int) -> int:
        """Fails on negative input."""
        if n < 0:
            raise ValueError("negative")
        return n

    model = ScriptedModel(
        [
            tool_calls(tool_call("flaky", {"n": -1})),
            tool_calls(tool_call("flaky", {"n": 1})),
            final_answer("1"),
        ]
    )
    run = await arun_agent(model, [flaky], "go", Budget(turns=4))
    assert [m.kind for m in run.result.mistakes] == [MistakeKind.TOOL_ERROR]
    assert len(run.result.recoveries) == 1
    assert "ValueError: negative" in model.requests[1].messages[-1].content


async def test_async_retries_use_the_injected_sleep() -> None:
    sleeps: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        sleeps.append(seconds)

    model = FailingModel(ScriptedModel([final_answer("x")]), failures=1)
    run = await arun_agent(model, [length], "x", Budget(turns=1), sleep=fake_sleep)
    assert run.success and run.turns_used == 1
    assert len(sleeps) == 1


async def test_async_grace_turn() -> None:
    model = ScriptedModel([tool_calls(tool_call("length", {"text": "a"})), final_answer("partial")])
    run = await arun_agent(model, [length], "x", Budget(turns=1), exhaustion="grace")
    assert run.status is EpisodeStatus.BUDGET_EXHAUSTED
    assert run.output == "partial" and run.result.grace_turn
    assert model.requests[-1].tool_choice == "none"


async def test_a_sync_only_model_runs_in_a_thread() -> None:
    class SyncOnly:
        model_name = "sync-only"
        provider_name = "test"

        def complete(
            self,
            messages: Sequence[ChatMessage],
            tools: Sequence[ToolSpec],
            *,
            notice: str | None,
            tool_choice: str = "auto",
        ) -> ModelResponse:
            return final_answer("from a thread")

    run = await arun_agent(SyncOnly(), [length], "x", Budget(turns=1))
    assert run.output == "from a thread"


def test_sync_driver_runs_async_tools() -> None:
    model = ScriptedModel([tool_calls(tool_call("fetch", {"key": "a"})), final_answer("A")])
    run = run_agent(model, [fetch], "x", Budget(turns=2))
    assert run.messages[-2].content == "A"


def test_tools_see_the_current_episode_in_worker_threads() -> None:
    seen: list[bool] = []

    def probe(n: int) -> int:
        """Reports whether the episode is visible."""
        seen.append(current_episode() is not None)
        return n

    batch = tool_calls(tool_call("probe", {"n": 1}), tool_call("probe", {"n": 2}))
    run_agent(ScriptedModel([batch, final_answer("ok")]), [probe], "x", Budget(turns=2))
    assert seen == [True, True]
