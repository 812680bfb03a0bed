"""The controller and episodes: with / async with, exhaustion modes, tools, sub-agents."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from _sdk_doubles import FakeClock
from budgetmix import (
    Budget,
    BudgetController,
    BudgetExhausted,
    BudgetmixError,
    ConfigError,
    EarlyStopped,
    EpisodeResult,
    EpisodeStatus,
    current_episode,
)


def test_constructor_validates() -> None:
    with pytest.raises(ConfigError, match="budget"):
        BudgetController({"turns": 3})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="exhaustion"):
        BudgetController(Budget(turns=3), exhaustion="crash")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="warn_fraction"):
        BudgetController(Budget(turns=3), warn_fraction=1.5)


# -- exhaustion ------------------------------------------------------------------------
def test_exhaustion_ends_the_episode_with_a_terminal_event() -> None:
    c = BudgetController(Budget(turns=2))
    with c.episode() as ep:
        seen = [t.number for t in ep.turns(model="m")]
    assert seen == [1, 2]
    r = ep.result
    assert r is not None
    assert r.status is EpisodeStatus.BUDGET_EXHAUSTED and r.stop_reason == "turns"
    assert r.used["turns"] == 2
    assert [e.kind for e in r.events if e.kind == "exhausted"] == ["exhausted"]
    assert r.events[-1].kind == "exhausted"
    assert r.events[-1].detail == {"dimension": "turns"}


def test_begin_turn_past_the_limit_is_an_outcome_by_default() -> None:
    c = BudgetController(Budget(turns=1))
    with c.episode() as ep:
        ep.begin_turn()
        ep.begin_turn()
    assert ep.result is not None and ep.result.status is EpisodeStatus.BUDGET_EXHAUSTED


def test_raise_mode_carries_counts_and_partial_transcript() -> None:
    c = BudgetController(Budget(turns=2, tool_calls=5), exhaustion="raise")
    with pytest.raises(BudgetExhausted) as info, c.episode() as ep:
        for turn in ep.turns():
            ep.record_message({"role": "assistant", "content": f"step {turn.number}"})
            ep.tool_batch(["t"])[0].succeed()
    exc = info.value
    assert exc.dimension == "turns"
    assert exc.episode_id == ep.id
    assert exc.used["turns"] == 2 and exc.used["tool_calls"] == 2
    assert exc.limits["turns"] == 2 and exc.limits["tool_calls"] == 5
    assert exc.transcript == [
        {"role": "assistant", "content": "step 1"},
        {"role": "assistant", "content": "step 2"},
    ]
    assert ep.result is not None and ep.result.status is EpisodeStatus.BUDGET_EXHAUSTED


def test_raise_mode_from_begin_turn() -> None:
    c = BudgetController(Budget(turns=1), exhaustion="raise")
    with pytest.raises(BudgetExhausted, match="turns"), c.episode() as ep:
        ep.begin_turn()
        ep.begin_turn()
    assert ep.result is not None and ep.result.stop_reason == "turns"


def test_grace_mode_yields_exactly_one_tool_less_grace_turn() -> None:
    c = BudgetController(Budget(turns=2), exhaustion="grace")
    with c.episode() as ep:
        turns = []
        for turn in ep.turns(model="m"):
            turns.append((turn.number, turn.grace, turn.notice))
            if turn.grace:
                with pytest.raises(BudgetExhausted):
                    ep.tool_batch(["search"])  # the wrap-up turn has no tools
    assert turns == [
        (1, False, "Budget (v1): turn 1 of 2, 2 turns left including this one."),
        (2, False, "Budget (v1): turn 2 of 2, the final turn."),
        (3, True, "Budget (v1): turn 2 of 2, the final turn."),
    ]
    r = ep.result
    assert r is not None
    assert r.status is EpisodeStatus.BUDGET_EXHAUSTED and r.grace_turn
    assert r.used["turns"] == 2 and r.used["tool_calls"] == 0
    assert [e.kind for e in r.events].count("grace_turn") == 1


def test_grace_turn_answer_can_still_succeed() -> None:
    c = BudgetController(Budget(turns=1), exhaustion="grace")
    with c.episode() as ep:
        for turn in ep.turns():
            if turn.grace:
                ep.finish(success=True, output="best effort")
    assert ep.result is not None
    assert ep.result.status is EpisodeStatus.SUCCESS and ep.result.grace_turn


def test_failure_after_exhaustion_keeps_the_stop_reason() -> None:
    c = BudgetController(Budget(turns=1))
    with c.episode() as ep:
        for _ in ep.turns():
            pass
        ep.finish(success=False)
    assert ep.result is not None
    assert ep.result.status is EpisodeStatus.BUDGET_EXHAUSTED
    assert ep.result.stop_reason == "turns"


def test_extension_policy_grants_and_is_recorded() -> None:
    class OneMore:
        def __init__(self) -> None:
            self.asked: list[str] = []

        def on_limit(self, view: Any, dimension: str) -> dict[str, float] | None:
            self.asked.append(dimension)
            return {"turns": 1} if view.grants == 0 else None

    policy = OneMore()
    c = BudgetController(Budget(turns=2), extension=policy)
    with c.episode() as ep:
        n = sum(1 for _ in ep.turns())
    assert n == 3
    assert policy.asked == ["turns", "turns"]
    assert ep.result is not None
    assert [e.kind for e in ep.result.events].count("extended") == 1
    assert ep.result.limits["turns"] == 3


def test_early_stop_policy() -> None:
    class StopAfterTwoMistakes:
        def check(self, view: Any) -> str | None:
            return "stuck" if len(view.mistakes) >= 2 else None

    c = BudgetController(Budget(turns=10), early_stop=StopAfterTwoMistakes())
    with c.episode() as ep:
        for _ in ep.turns():
            ep.record_mistake("tool_error")
    assert ep.result is not None
    assert ep.result.status is EpisodeStatus.EARLY_STOPPED and ep.result.stop_reason == "stuck"
    assert ep.result.used["turns"] == 2

    with c.episode() as ep2:
        ep2.record_mistake("tool_error")
        ep2.record_mistake("tool_error")
        ep2.begin_turn()
    assert ep2.result is not None and ep2.result.status is EpisodeStatus.EARLY_STOPPED
    raising = BudgetController(
        Budget(turns=10), early_stop=StopAfterTwoMistakes(), exhaustion="raise"
    )
    with pytest.raises(EarlyStopped, match="stuck"), raising.episode() as ep3:
        ep3.record_mistake("tool_error")
        ep3.record_mistake("tool_error")
        ep3.begin_turn()


# -- terminal status ---------------------------------------------------------------------
def test_every_way_out_sets_exactly_one_status() -> None:
    c = BudgetController(Budget(turns=3))
    with c.episode() as plain:
        plain.begin_turn()
    assert plain.result is not None and plain.result.status is EpisodeStatus.FAILED

    with pytest.raises(KeyError), c.episode() as broken:
        broken.begin_turn()
        raise KeyError("bug in the loop")
    assert broken.result is not None and broken.result.status is EpisodeStatus.ERROR
    assert broken.result.error is not None and broken.result.error.startswith("KeyError")

    with c.episode() as done:
        first = done.finish(success=True, output=1)
        with pytest.raises(BudgetmixError, match="already finished"):
            done.finish(success=False)
        with pytest.raises(BudgetmixError, match="already finished"):
            done.begin_turn()
    assert done.result is first and first.status is EpisodeStatus.SUCCESS


# -- sync and async drivers ----------------------------------------------------------------
def test_sync_with_and_current_episode() -> None:
    c = BudgetController(Budget(turns=2), name="solver")
    assert current_episode() is None
    with c.episode(metadata={"task": "t1"}) as ep:
        assert current_episode() is ep
        with ep.child(Budget(turns=1)) as sub:
            assert current_episode() is sub
        assert current_episode() is ep
    assert current_episode() is None
    assert ep.result is not None and ep.result.name == "solver"
    assert ep.result.metadata == {"task": "t1"}
    assert sub.result is not None and sub.result.name == "solver.child"


async def test_async_with_and_async_retry(fake_clock: FakeClock) -> None:
    c = BudgetController(Budget(turns=3), clock=fake_clock)
    attempts = 0

    async def model() -> str:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise TimeoutError
        await asyncio.sleep(0)
        return "done"

    async with c.episode() as ep:
        assert current_episode() is ep
        turn = ep.begin_turn(model="m")
        assert await turn.acall(model, sleep=fake_clock.asleep) == "done"
        ep.finish(success=True)
    assert attempts == 2 and len(fake_clock.sleeps) == 1
    assert ep.result is not None and ep.result.status is EpisodeStatus.SUCCESS
    assert ep.result.used["turns"] == 1


async def test_async_exhaustion_is_an_outcome() -> None:
    c = BudgetController(Budget(turns=1))
    async with c.episode() as ep:
        ep.begin_turn()
        ep.begin_turn()
    assert ep.result is not None and ep.result.status is EpisodeStatus.BUDGET_EXHAUSTED


# -- the tool decorator ---------------------------------------------------------------------
def test_tool_decorator_sync() -> None:
    c = BudgetController(Budget(turns=2, tool_calls=3))

    @c.tool
    def divide(a: float, b: float) -> float:
        """Divide."""
        return a / b

    assert divide.__name__ == "divide" and divide.__doc__ == "Divide."
    assert divide(6, 3) == 2  # outside an episode: unchanged, uncharged
    with c.episode() as ep:
        ep.begin_turn()
        assert divide(6, 2) == 3
        with pytest.raises(ZeroDivisionError):
            divide(1, 0)
        assert ep.ledger.used("tool_calls") == 2
        assert [(m.kind, m.tool) for m in ep.mistakes] == [("tool_error", "divide")]
        assert divide(1, 1) == 1
        with pytest.raises(BudgetExhausted):
            divide(1, 1)
    assert ep.result is not None
    assert ep.result.status is EpisodeStatus.BUDGET_EXHAUSTED
    assert ep.result.stop_reason == "tool_calls" and ep.result.used["tool_calls"] == 3
    assert [r.recovered for r in ep.result.recoveries] == [("m1",)]


async def test_tool_decorator_async() -> None:
    c = BudgetController(Budget(turns=2, tool_calls=5))

    @c.tool
    async def fetch(key: str) -> str:
        await asyncio.sleep(0)
        if key == "missing":
            raise LookupError(key)
        return key.upper()

    assert await fetch("x") == "X"
    async with c.episode() as ep:
        ep.begin_turn()
        assert await asyncio.gather(fetch("a"), fetch("b")) == ["A", "B"]
        with pytest.raises(LookupError):
            await fetch("missing")
        assert ep.ledger.used("tool_calls") == 3
        assert [m.kind for m in ep.mistakes] == ["tool_error"]
        ep.finish(success=True)
    assert ep.result is not None and ep.result.success


# -- sub-agents ---------------------------------------------------------------------------
def test_child_draws_from_parent() -> None:
    c = BudgetController(Budget(turns=4, tool_calls=4))
    with c.episode(name="lead") as parent:
        parent.begin_turn()
        with parent.child(Budget(turns=10, tool_calls=10), name="helper") as child:
            n = 0
            for _ in child.turns():
                n += 1
                child.tool_batch(["t"])[0].succeed()
        assert n == 3  # the parent had 3 turns left: the child cannot take more
        assert child.result is not None
        assert child.result.status is EpisodeStatus.BUDGET_EXHAUSTED
        assert child.result.stop_reason == "turns"
        assert parent.ledger.used("turns") == 4 and parent.ledger.used("tool_calls") == 3
        assert parent.try_begin_turn() is None
    assert parent.result is not None
    assert parent.result.status is EpisodeStatus.BUDGET_EXHAUSTED
    assert parent.result.used["turns"] == 4


def test_child_limits_bind_before_the_parent() -> None:
    c = BudgetController(Budget(turns=10))
    with c.episode() as parent, c.episode(budget=Budget(turns=2), parent=parent) as child:
        assert sum(1 for _ in child.turns()) == 2
    assert parent.ledger.used("turns") == 2
    assert child.result is not None and child.result.used["turns"] == 2


def test_grant_on_a_child_cannot_overspend_the_parent() -> None:
    c = BudgetController(Budget(turns=2))
    with c.episode() as parent, parent.child(Budget(turns=2)) as child:
        child.begin_turn()
        child.begin_turn()
        child.grant(turns=5)
        assert child.try_begin_turn() is None  # the parent has nothing left
    assert parent.ledger.used("turns") == 2


def test_results_are_value_objects() -> None:
    c = BudgetController(Budget(turns=1))
    with c.episode(episode_id="e1") as ep:
        ep.begin_turn()
        ep.finish(success=True, output={"answer": 4})
    r = ep.result
    assert isinstance(r, EpisodeResult) and r.episode_id == "e1"
    with pytest.raises(AttributeError):
        r.status = EpisodeStatus.FAILED  # type: ignore[misc]
    assert r.to_dict()["status"] == "success" and r.turns_used == 1
