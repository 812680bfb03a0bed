"""run_agent under each notice placement: ephemeral (per request) vs. in the observation (kept)."""

from __future__ import annotations

import asyncio

import pytest
from budgetmix import Budget, BudgetController, render_notice
from budgetmix.adapters import ChatMessage, ScriptedModel, arun_agent, run_agent
from budgetmix.adapters.testing.scripted import final_answer, tool_call, tool_calls
from budgetmix.ledger import Ledger
from budgetmix.policies import NotifyEveryTurn, NotifyFinalTurn

pytestmark = pytest.mark.usefixtures("no_network")


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _script() -> list:
    return [
        tool_calls(
            tool_call("add", {"a": 1, "b": 2}, id="c1"), tool_call("add", {"a": 3, "b": 4}, id="c2")
        ),
        tool_calls(tool_call("add", {"a": 5, "b": 6}, id="c3")),
        final_answer("done"),
    ]


def _notice(turn: int, turns: int = 4) -> str:
    ledger = Ledger(Budget(turns=turns))
    for _ in range(turn):
        ledger.try_charge_turn()
    return render_notice(ledger.state(in_turn=True))


def _controller(placement: str) -> BudgetController:
    return BudgetController(Budget(turns=4), notice=NotifyEveryTurn(placement=placement))  # type: ignore[arg-type]


def test_observation_placement_keeps_each_notice_in_its_observation() -> None:
    model = ScriptedModel(_script())
    run = run_agent(model, [add], "add things", _controller("observation"))
    assert run.output == "done"
    assert all(r.notice is None for r in model.requests)
    first, second, third = (list(r.messages) for r in model.requests)
    assert first == [ChatMessage(role="user", content="add things\n" + _notice(1))]
    # turn 2: the notice is in the batch's LAST tool message; the first one is untouched
    assert second[0] == first[0]
    assert [m.role for m in second] == ["user", "assistant", "tool", "tool"]
    assert second[2].content == "3"
    assert second[3].content == "7\n" + _notice(2)
    # turn 3: every earlier message is byte-identical (prefix-stable, cache-friendly)
    assert third[: len(second)] == second
    assert third[-1].content == "11\n" + _notice(3)
    assert list(run.messages[: len(third)]) == third


def test_ephemeral_placement_is_the_default_and_never_stored() -> None:
    model = ScriptedModel(_script())
    run = run_agent(model, [add], "add things", Budget(turns=4))
    assert [r.notice for r in model.requests] == [_notice(1), _notice(2), _notice(3)]
    assert all("Budget" not in m.content for m in run.messages)
    model = ScriptedModel(_script())
    run_agent(model, [add], "add things", _controller("ephemeral"))
    assert [r.notice for r in model.requests] == [_notice(1), _notice(2), _notice(3)]


def test_observation_placement_on_a_silent_turn_places_nothing() -> None:
    controller = BudgetController(Budget(turns=3), notice=NotifyFinalTurn(placement="observation"))
    model = ScriptedModel(_script())
    run_agent(model, [add], "add things", controller)
    assert "Budget" not in "".join(m.content for m in model.requests[1].messages)
    assert model.requests[2].messages[-1].content == "11\n" + _notice(3, 3)


def test_async_loop_places_the_same_bytes() -> None:
    sync_model, async_model = ScriptedModel(_script()), ScriptedModel(_script())
    run_agent(sync_model, [add], "add things", _controller("observation"))
    asyncio.run(arun_agent(async_model, [add], "add things", _controller("observation")))
    assert [r.messages for r in async_model.requests] == [r.messages for r in sync_model.requests]
