"""The episode's decisions as an I/O-free state machine: driven here without an episode,
a ledger, a tracer or a hook, only by the answers it returns."""

from __future__ import annotations

import contextlib

import pytest
from budgetmix import Budget, BudgetExhausted, EarlyStopped, EpisodeStatus
from budgetmix.decisions import Closing, EpisodeMachine, TurnAction
from budgetmix.ledger import Ledger, LedgerState


def _state(turns_used: int) -> LedgerState:
    ledger = Ledger(Budget(turns=10))
    if turns_used:
        ledger.try_charge_turn(turns_used)
    return ledger.state(in_turn=True)


def test_a_running_episode_charges_and_a_finished_one_refuses() -> None:
    m = EpisodeMachine("end")
    assert m.next_turn() is TurnAction.CHARGE
    assert m.close(m.finishing(True))
    assert m.status is EpisodeStatus.SUCCESS
    assert m.next_turn() is TurnAction.FINISHED
    assert not m.close(m.finishing(False))  # the first ending stays
    assert m.status is EpisodeStatus.SUCCESS


@pytest.mark.parametrize(
    ("mode", "dimension", "first", "then"),
    [
        ("end", "turns", TurnAction.STOP, TurnAction.STOP),
        ("raise", "turns", TurnAction.STOP, TurnAction.STOP),
        ("grace", "turns", TurnAction.GRACE, TurnAction.STOP),  # one grace turn, once
        ("grace", "cost_usd", TurnAction.STOP, TurnAction.STOP),  # grace is for turns only
    ],
)
def test_a_refusal_becomes_a_grace_turn_or_a_stop(
    mode: str, dimension: str, first: TurnAction, then: TurnAction
) -> None:
    m = EpisodeMachine(mode)  # type: ignore[arg-type]
    assert m.refused(dimension)  # reported the first time only
    assert not m.refused("tool_calls")
    assert m.exhausted == dimension
    assert m.after_refusal() is first
    assert m.next_turn() is then
    assert m.grace_used is (first is TurnAction.GRACE)
    assert m.stopped_by() == (False, dimension)


def test_a_grant_that_unblocks_lets_the_episode_charge_again() -> None:
    m = EpisodeMachine("end")
    m.refused("turns")
    assert m.next_turn() is TurnAction.STOP
    m.unblocked()
    assert m.next_turn() is TurnAction.CHARGE and m.exhausted is None


def test_an_early_stop_keeps_its_first_reason_and_stops_every_later_turn() -> None:
    m = EpisodeMachine("grace")
    assert not m.stopped_early(None) and not m.stopped_early("")
    assert m.stopped_early("no progress")
    assert not m.stopped_early("another reason")
    assert m.next_turn() is TurnAction.STOP
    assert m.stopped_by() == (True, "no progress")
    assert m.finishing(False) == Closing(EpisodeStatus.EARLY_STOPPED, "no progress")


def test_a_failure_keeps_the_cause_that_stopped_the_loop() -> None:
    m = EpisodeMachine("end")
    assert m.finishing(False) == Closing(EpisodeStatus.FAILED)
    m.refused("tool_calls")
    assert m.finishing(False) == Closing(EpisodeStatus.BUDGET_EXHAUSTED, "tool_calls")
    assert m.finishing(True) == Closing(EpisodeStatus.SUCCESS)


def test_the_warning_is_given_once_in_the_last_share() -> None:
    m = EpisodeMachine("end")
    assert not m.should_warn(_state(5), 0.2)
    assert m.should_warn(_state(9), 0.2)  # 2 of 10 left, counting the one in progress
    assert not m.should_warn(_state(10), 0.2)
    assert not EpisodeMachine("end").should_warn(_state(10), 0.0)  # 0 switches it off


@pytest.mark.parametrize("mode", ["end", "raise", "grace"])
def test_leaving_the_block(mode: str) -> None:
    m = EpisodeMachine(mode)  # type: ignore[arg-type]
    mine = BudgetExhausted("turns", {}, {}, episode_id="e1")
    other = BudgetExhausted("turns", {}, {}, episode_id="someone else")
    swallow = mode != "raise"
    assert m.exiting(mine, "e1") == Closing(EpisodeStatus.BUDGET_EXHAUSTED, "turns", None, swallow)
    stopped = m.exiting(EarlyStopped("why", None), "e1")
    assert stopped == Closing(EpisodeStatus.EARLY_STOPPED, "why", None, swallow)
    error = m.exiting(other, "e1")
    assert error is not None and error.status is EpisodeStatus.ERROR and not error.suppress
    assert error.error is not None and error.error.startswith("BudgetExhausted: ")
    assert m.exiting(None, "e1") == Closing(EpisodeStatus.FAILED)
    m.close(Closing(EpisodeStatus.SUCCESS))
    assert m.exiting(None, "e1") is None  # ended before: a clean exit changes nothing


def test_a_clean_exit_raises_only_an_exhaustion_in_raise_mode() -> None:
    for mode, raises in (("end", False), ("grace", False), ("raise", True)):
        m = EpisodeMachine(mode)  # type: ignore[arg-type]
        m.refused("turns")
        closing = m.exiting(None, "e1")
        assert closing is not None and m.close(closing)
        assert m.raises_after_exit() is raises


def test_an_exception_after_a_refusal_ends_the_episode_as_the_ledger_says() -> None:
    """A framework that catches the stop and raises an exception of its own from another
    ``except`` (Google ADK) loses it from the chain: the ledger's refusal decides."""
    from budgetmix import BudgetController

    controller = BudgetController(Budget(turns=1))
    with pytest.raises(RuntimeError, match="agent run failed"), controller.episode() as ep:
        ep.begin_turn()
        with contextlib.suppress(BudgetExhausted):  # the framework's handler
            ep.begin_turn()
        try:
            raise KeyError("state")
        except KeyError:
            raise RuntimeError("agent run failed") from None  # no stop in the chain
    assert ep.result is not None
    assert ep.result.status is EpisodeStatus.BUDGET_EXHAUSTED
    assert ep.result.stop_reason == "turns"
    assert ep.result.error is not None and "agent run failed" in ep.result.error
    m = EpisodeMachine("end")
    assert m.exiting(ValueError("x"), "e1") == Closing(EpisodeStatus.ERROR, None, "ValueError: x")
    m.refused("cost_usd")
    closing = m.exiting(ValueError("x"), "e1")
    assert closing == Closing(EpisodeStatus.BUDGET_EXHAUSTED, "cost_usd", "ValueError: x")
