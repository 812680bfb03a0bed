"""The one fixed-clock ledger helper (training rollouts, replays, notice previews use it)."""

from __future__ import annotations

import time

import pytest
from budgetmix.budget import Budget
from budgetmix.exceptions import ConfigError
from budgetmix.ledger import fixed_clock_ledger
from budgetmix.notice import render_notice


def test_the_clock_never_moves_and_a_turn_count_is_a_turn_budget() -> None:
    ledger = fixed_clock_ledger(3)
    assert ledger.limits()["turns"] == 3 and ledger.limits()["wall_seconds"] is None
    assert ledger.try_charge_turn() is None
    time.sleep(0.01)
    assert ledger.elapsed() == 0.0
    first = render_notice(ledger.state(in_turn=True), "v1")
    assert first == render_notice(fixed_clock_ledger(3).state(in_turn=False), "v1")


def test_a_budget_keeps_its_other_dimensions() -> None:
    ledger = fixed_clock_ledger(Budget(turns=2, tool_calls=4, wall_seconds=5))
    assert ledger.limits()["tool_calls"] == 4
    time.sleep(0.01)
    assert ledger.counts()["wall_seconds"] == 0.0


@pytest.mark.parametrize("bad", [True, "3", 2.5, None])
def test_anything_else_is_refused_by_name(bad: object) -> None:
    with pytest.raises(ConfigError, match="budget"):
        fixed_clock_ledger(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="turns"):
        fixed_clock_ledger(0)
