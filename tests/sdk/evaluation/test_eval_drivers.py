"""How the evaluator drives an episode (evaluation/_drive.py): a sync agent's whole episode
runs in one pool thread, an async agent's on the loop; either way the agent sees its own
episode (``current_episode()``: a budgetmix-wrapped client inside ``act`` charges it), and
exceptions reach the episode's handling as before."""

from __future__ import annotations

import asyncio
import gc
import threading
import weakref
from pathlib import Path

import pytest
from _eval_doubles import LineEnv
from budgetmix import current_episode
from budgetmix.environment import Task
from budgetmix.evaluation import EvalConfig, Evaluator
from budgetmix.evaluation._drive import Call, drive_async, drive_sync

TASKS = [Task(task_id=f"t{i}", make_env=lambda: LineEnv(goal=3), seed=i) for i in range(4)]


class Seeing:
    """Records, per act, its episode's task id and its thread."""

    sees_budget = True

    def __init__(self, log: list[tuple[object, int]]) -> None:
        self.log = log

    def start(self, env: object, seed: int) -> None:
        pass

    def _see(self) -> str:
        ep = current_episode()
        task = None if ep is None else ep.metadata.get("task_id")
        self.log.append((task, threading.get_ident()))
        return "+"

    def act(self, observation: str, notice: str | None, turns_remaining: int | None) -> str:
        return self._see()


class AsyncSeeing(Seeing):
    async def act(  # type: ignore[override]
        self, observation: str, notice: str | None, turns_remaining: int | None
    ) -> str:
        return self._see()


def _run(tmp_path: Path, agent: type[Seeing], concurrency: int) -> list[tuple[object, int]]:
    log: list[tuple[object, int]] = []
    cfg = EvalConfig(budgets=(5,), concurrency=concurrency)
    run = Evaluator(lambda: agent(log), TASKS, cfg).run(tmp_path / "r.jsonl")
    assert [r.success for r in run.records] == [True] * len(TASKS)
    return log


@pytest.mark.parametrize("agent", [Seeing, AsyncSeeing], ids=["sync", "async"])
@pytest.mark.parametrize("concurrency", [1, 4])
def test_the_agent_sees_its_own_episode(
    tmp_path: Path, agent: type[Seeing], concurrency: int
) -> None:
    log = _run(tmp_path, agent, concurrency)
    assert len(log) == 3 * len(TASKS)  # three '+' reach the goal
    assert sorted(task for task, _ in log) == sorted(t.task_id for t in TASKS for _ in range(3))


def test_a_sync_episode_runs_in_one_thread_and_not_on_the_loop(tmp_path: Path) -> None:
    log = _run(tmp_path, Seeing, 4)  # four pool threads: each episode keeps to one
    main = threading.get_ident()
    for task in {t for t, _ in log}:
        threads = {th for t, th in log if t == task}
        assert len(threads) == 1 and main not in threads


class RunsItsOwnLoop(Seeing):
    """A sync agent over an async library (``asyncio.run`` inside ``act``)."""

    def act(self, observation: str, notice: str | None, turns_remaining: int | None) -> str:
        async def inner() -> str:
            return self._see()

        return asyncio.run(inner())


def test_a_sync_agent_may_run_its_own_event_loop(tmp_path: Path) -> None:
    assert len(_run(tmp_path, RunsItsOwnLoop, 1)) == 3 * len(TASKS)


def test_drive_sync_throws_a_calls_exception_into_the_core() -> None:
    def boom() -> None:
        raise ValueError("boom")

    def core():  # type: ignore[no-untyped-def]
        first = yield Call(lambda: 1, (), True)
        try:
            yield Call(boom, (), False)
        except ValueError as exc:
            return first, str(exc)
        raise AssertionError("the exception was not thrown in")

    assert drive_sync(core()) == (1, "boom")

    def unhandled():  # type: ignore[no-untyped-def]
        yield Call(boom, (), False)

    with pytest.raises(ValueError, match="boom"):
        drive_sync(unhandled())


class _Held:
    pass


def _catching(held: _Held):  # type: ignore[no-untyped-def]
    def boom() -> None:
        raise ValueError("boom")

    try:
        yield Call(boom, (), True)
    except ValueError:
        return "caught"
    return "not thrown"


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_caught_exception_leaves_nothing_of_the_core_alive(driver: str) -> None:
    # a batching server counts an agent in flight until it is freed: no reference cycle
    # through the exception's traceback may keep the finished core's frame (and agent)
    held = _Held()
    ref = weakref.ref(held)
    core = _catching(held)
    del held
    gc.disable()
    try:
        if driver == "sync":
            assert drive_sync(core) == "caught"
        else:

            async def offload(fn, *args):  # type: ignore[no-untyped-def]
                return fn(*args)

            run = drive_async(core, offload, agent_awaits=False, env_offloaded=True)
            assert asyncio.run(run) == "caught"
        del core
        assert ref() is None, "the core's frame outlived the episode"
    finally:
        gc.enable()
