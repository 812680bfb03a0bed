"""Expected-Q action quality: a policy against itself scores the noise floor; the oracle wins."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

pytest.importorskip("gymnasium")
pytest.importorskip("numpy")

from budgetmix.environment import Task
from budgetmix.training.diagnostics.action_quality import compare_expected, non_tied
from budgetmix.training.diagnostics.episodes import (
    DecisionPoint,
    frozenlake_oracle_policy,
    frozenlake_q,
    pointwise,
    run_episodes,
    worst_action,
)
from budgetmix.training.envs.frozenlake_compact import MOVE_LETTERS, CompactFrozenLake
from budgetmix.training.envs.frozenlake_oracle import FrozenLakeModel

DEMO_MAP = ("SFF", "HFF", "HHG")
MODEL = FrozenLakeModel(DEMO_MAP, True, 0.8)
Q = frozenlake_q(MODEL)


def _points(n: int = 24) -> list[DecisionPoint]:
    tasks = [
        Task(task_id=f"t{s}", make_env=lambda: CompactFrozenLake(DEMO_MAP, 0.8), seed=s)
        for s in range(n)
    ]
    rng = random.Random(0)
    wander = pointwise(lambda p: rng.choice("ldru"))
    return [p for tr in run_episodes(tasks, wander, 10, q=Q) for p in tr.points]


def _noisy(seed: int, noise: float) -> object:
    return frozenlake_oracle_policy(MODEL, moves=MOVE_LETTERS, noise=noise, seed=seed)


def test_a_deterministic_policy_against_itself_scores_zero_and_a_zero_floor() -> None:
    oracle = frozenlake_oracle_policy(MODEL, moves=MOVE_LETTERS)
    res = compare_expected(_points(), oracle, oracle, Q, samples=2)
    assert res.non_tied > 20
    assert res.a_better == 0.0 and res.b_better == 0.0 and res.noise_floor == 0.0


def test_a_noisy_policy_against_itself_scores_its_noise_floor() -> None:
    points = _points(40)
    res = compare_expected(points, _noisy(1, 0.4), _noisy(2, 0.4), Q, samples=4)  # type: ignore[arg-type]
    assert res.noise_floor is not None and res.noise_floor > 0.1
    assert res.a_better == pytest.approx(res.noise_floor, abs=0.06)
    assert res.b_better == pytest.approx(res.noise_floor, abs=0.06)
    # more samples per point lower the floor
    more = compare_expected(points, _noisy(3, 0.4), _noisy(4, 0.4), Q, samples=32)  # type: ignore[arg-type]
    assert more.noise_floor is not None and more.noise_floor < res.noise_floor


def test_the_oracle_beats_the_worst_move_on_every_non_tied_point() -> None:
    points = _points()
    oracle = frozenlake_oracle_policy(MODEL, moves=MOVE_LETTERS)
    worst = pointwise(worst_action(Q, tuple(MOVE_LETTERS)))
    res = compare_expected(points, oracle, worst, Q, samples=1)
    assert res.a_better == 1.0 and res.b_better == 0.0
    assert res.non_tied == len(non_tied(points, Q, 0.01))
    assert res.points == len(points) > res.non_tied  # hopeless states (too few turns) are tied


def test_mistakes_are_losses_in_q_not_environment_labels() -> None:
    # waiting (u into the wall) at the start with 14 turns left is optimal: not a mistake
    tasks = [Task(task_id="t", make_env=lambda: CompactFrozenLake(DEMO_MAP, 0.8), seed=0)]
    script: Sequence[str] = ["u", "d"]
    it = iter(script)
    (tr,) = run_episodes(tasks, pointwise(lambda p: next(it, "r")), 2, q=Q)
    assert tr.mistakes[0] is False
