"""Diagnostics on hand-checkable FrozenLake maps with scripted and oracle policies."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import pytest

pytest.importorskip("gymnasium")
pytest.importorskip("numpy")

from budgetmix.environment import Task
from budgetmix.exceptions import ConfigError
from budgetmix.training.diagnostics.episodes import (
    DecisionPoint,
    compare_actions,
    frozenlake_oracle_policy,
    frozenlake_q,
    invalid_reply,
    pointwise,
    run_episodes,
    success_curve,
    worst_action,
)
from budgetmix.training.diagnostics.monte_carlo import frozenlake_reseed, monte_carlo_q
from budgetmix.training.diagnostics.recovery_injection import recovery_injection
from budgetmix.training.envs.frozenlake_compact import CompactFrozenLake
from budgetmix.training.envs.frozenlake_oracle import FrozenLakeModel

CORRIDOR = ("SFFG",)  # three moves right, nothing else matters
SLIPPERY = ("SFF", "HFF", "HHG")


def _tasks(desc: Sequence[str], n: int, *, slippery: bool, rate: float = 0.8) -> list[Task]:
    return [
        Task(
            task_id=f"t{s}",
            make_env=lambda: CompactFrozenLake(desc, rate, slippery=slippery),
            seed=s,
        )
        for s in range(n)
    ]


def _model(desc: Sequence[str], *, slippery: bool, rate: float = 0.8) -> FrozenLakeModel:
    return FrozenLakeModel(tuple(desc), slippery, rate)


def test_run_episodes_records_points_notices_and_mistakes() -> None:
    model = _model(CORRIDOR, slippery=False)
    q = frozenlake_q(model)
    # right, then left: with 3 turns left that loses the only way to make it in time
    script = iter(["r", "l", "r", "r"])
    policy = pointwise(lambda p: next(script))
    (trace,) = run_episodes(_tasks(CORRIDOR, 1, slippery=False), policy, 4, q=q)
    assert not trace.success and trace.termination == "budget_exhausted"
    assert trace.actions == ("r", "l", "r", "r")
    # once nothing can succeed, no move loses anything: not a mistake
    assert trace.mistakes == (False, True, False, False)
    assert [p.after_mistake for p in trace.points] == [False, False, True, False]
    first, third = trace.points[0], trace.points[2]
    assert (first.turn, first.turns_remaining, first.state) == (1, 4, 0)
    assert (third.turn, third.turns_remaining, third.state) == (3, 2, 0)
    assert third.messages[0]["role"] == "system"
    assert third.messages[-1]["content"] == "A A A A A A\n[budget v1c] turn 3/4, 2 left"
    assert third.actions == ("r", "l")


def test_run_episodes_stops_at_the_budget() -> None:
    (trace,) = run_episodes(
        _tasks(CORRIDOR, 1, slippery=False), pointwise(lambda p: "u"), 3
    )  # bumping the edge forever
    assert trace.termination == "budget_exhausted" and not trace.success
    assert len(trace.points) == 3 and all(trace.mistakes)
    with pytest.raises(ConfigError):
        run_episodes(_tasks(CORRIDOR, 1, slippery=False), pointwise(lambda p: "r"), 0)


def test_frozenlake_q_by_hand() -> None:
    q = frozenlake_q(_model(CORRIDOR, slippery=False))

    def point(cell: int, left: int) -> DecisionPoint:
        return DecisionPoint("t", 0, 1, left, left, cell, "", ())

    assert q(point(0, 3), "r") == 1.0  # three moves fit
    assert q(point(0, 2), "r") == 0.0  # they do not
    assert q(point(0, 3), "l") == 0.0  # bumping wastes the turn that was needed
    assert q(point(0, 4), "l") == 1.0
    assert q(point(2, 1), "right") == 1.0  # words parse too
    assert q(point(2, 2), "???") == 1.0  # invalid: stay, one turn fewer
    assert q(point(2, 1), "???") == 0.0


def test_oracle_vs_noisy_oracle_is_never_worse_and_better_after_mistakes() -> None:
    model = _model(SLIPPERY, slippery=True)
    q = frozenlake_q(model)
    oracle = frozenlake_oracle_policy(model)
    rng = random.Random(0)

    def stubborn(p: DecisionPoint) -> str:
        # errs now and then; after a mistake it repeats the wrong move (does not recover)
        if p.after_mistake and p.actions:
            return p.actions[-1]
        best = oracle([p])[0]
        return rng.choice(["left", "down", "right", "up"]) if rng.random() < 0.2 else best

    tasks = _tasks(SLIPPERY, 60, slippery=True)
    traces = run_episodes(tasks, pointwise(stubborn), 10, q=q)
    points = [p for t in traces for p in t.points]
    cmp = compare_actions(points, oracle, pointwise(stubborn), q)
    assert cmp.n == len(points) and cmp.n_after_mistake > 5
    assert cmp.b_better == 0.0 and cmp.b_better_after_mistake == 0.0
    assert cmp.a_better is not None and cmp.a_better_after_mistake is not None
    assert cmp.a_better_after_mistake > cmp.a_better
    assert cmp.a_better + (cmp.tie or 0.0) == pytest.approx(1.0)
    same = compare_actions(points, oracle, oracle, q)
    assert same.tie == 1.0 and same.a_better == 0.0
    assert set(cmp.to_dict()) >= {"n", "a_better", "a_better_after_mistake"}


@pytest.mark.slow
@pytest.mark.parametrize("reseed", [True, False])
def test_monte_carlo_q_matches_the_exact_values(reseed: bool) -> None:
    model = _model(SLIPPERY, slippery=True)
    exact = frozenlake_q(model)
    oracle = frozenlake_oracle_policy(model)
    tasks = _tasks(SLIPPERY, 1, slippery=True)
    (trace,) = run_episodes(tasks, pointwise(lambda p: "u"), 6)  # a few turns of waiting
    point = trace.points[2]
    mc = monte_carlo_q(
        tasks, oracle, n=300, reseed=frozenlake_reseed if reseed else None, max_attempts=20
    )
    for action in ("r", "d"):
        assert mc(point, action) == pytest.approx(exact(point, action), abs=0.09)


def test_success_curve_on_a_corridor() -> None:
    oracle = frozenlake_oracle_policy(_model(CORRIDOR, slippery=False))
    curve = success_curve(_tasks(CORRIDOR, 5, slippery=False), oracle, [2, 3, 5])
    assert [c.rate for c in curve] == [0.0, 1.0, 1.0]
    assert [c.episodes for c in curve] == [5, 5, 5]
    assert curve[0].low == 0.0 and curve[0].high > 0.0 and curve[1].high == 1.0


def test_recovery_injection_depends_on_the_budget_left() -> None:
    model = _model(CORRIDOR, slippery=False)
    q = frozenlake_q(model)
    oracle = frozenlake_oracle_policy(model)
    tasks = _tasks(CORRIDOR, 4, slippery=False)
    roomy = recovery_injection(tasks, oracle, 4, 1, worst_action(q), q=q)
    assert (roomy.injected, roomy.recovered, roomy.rate) == (4, 4, 1.0)
    assert roomy.baseline_rate == 1.0 and roomy.oracle_rate == 1.0
    tight = recovery_injection(tasks, oracle, 3, 1, invalid_reply(), q=q)
    assert (tight.rate, tight.baseline_rate, tight.oracle_rate) == (0.0, 1.0, 0.0)
    late = recovery_injection(tasks, oracle, 5, 5, invalid_reply())
    assert late.injected == 0 and late.oracle_rate is None  # every episode ended by turn 3
    with pytest.raises(ConfigError):
        recovery_injection(tasks, oracle, 3, 4, invalid_reply())


def test_slipping_takes_another_move_at_its_rate_from_its_seed() -> None:
    from budgetmix.training.diagnostics.episodes import slipping

    always_a = pointwise(lambda p: "a")
    points: list[Any] = [None] * 20_000  # the wrapped policy never reads a point
    assert list(slipping(always_a, 0.0, "abc", seed=1)(points)) == ["a"] * 20_000
    every = list(slipping(always_a, 1.0, "abc", seed=1)(points))
    assert "a" not in every and {"b", "c"} == set(every)
    some = list(slipping(always_a, 0.3, "abc", seed=2)(points))
    assert abs(sum(m != "a" for m in some) / len(some) - 0.3) < 0.02
    assert some == list(slipping(always_a, 0.3, "abc", seed=2)(points))
    with pytest.raises(ConfigError, match="rate"):
        slipping(always_a, 1.5, "abc", seed=1)
    with pytest.raises(ConfigError, match="two moves"):
        slipping(always_a, 0.2, "a", seed=1)
