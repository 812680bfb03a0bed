"""Budget sensitivity against known answers: blind policies score 0 (within noise), the oracle 1."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

pytest.importorskip("gymnasium")
pytest.importorskip("numpy")

from budgetmix.environment import Task
from budgetmix.exceptions import ConfigError
from budgetmix.training.diagnostics.budget_sensitivity import budget_sensitivity, start_points
from budgetmix.training.diagnostics.episodes import (
    DecisionPoint,
    frozenlake_oracle_policy,
    frozenlake_q,
)
from budgetmix.training.envs.frozenlake_compact import (
    MOVE_LETTERS,
    CompactFrozenLake,
    parse_move,
)
from budgetmix.training.envs.frozenlake_oracle import FrozenLakeModel

DEMO_MAP = ("SFF", "HFF", "HHG")
BUDGETS = list(range(2, 22))
MODEL = FrozenLakeModel(DEMO_MAP, True, 0.8)
Q = frozenlake_q(MODEL)


def _tasks(n: int, desc: Sequence[str] = DEMO_MAP) -> list[Task]:
    return [
        Task(task_id=f"t{s}", make_env=lambda: CompactFrozenLake(desc, 0.8), seed=s)
        for s in range(n)
    ]


def _run(policy: object, n: int = 200) -> object:
    return budget_sensitivity(
        _tasks(n),
        policy,
        BUDGETS,
        Q,
        parse_move,
        moves=tuple(MOVE_LETTERS),  # type: ignore[arg-type]
    )


def test_the_oracle_scores_one_and_its_optimal_budgets_are_the_known_ones() -> None:
    oracle = frozenlake_oracle_policy(MODEL, moves=MOVE_LETTERS)
    res = _run(oracle, 20)
    assert res.flip_action == "r"  # type: ignore[attr-defined]
    # right is strictly best with 4-9 turns left, waiting (up) with 10 or more; 2-3: all tied
    assert res.optimal_budgets == tuple(range(4, 10))  # type: ignore[attr-defined]
    assert res.other_budgets == tuple(range(10, 22))  # type: ignore[attr-defined]
    assert res.sensitivity == 1.0 and res.share_optimal == 1.0  # type: ignore[attr-defined]
    tied = [c for c in res.cells if c.tied]  # type: ignore[attr-defined]
    assert [c.turns_left for c in tied] == [2, 3]


def test_a_deterministic_blind_policy_scores_exactly_zero() -> None:
    blind = frozenlake_oracle_policy(MODEL, budget_blind=True, gamma=0.99, moves=MOVE_LETTERS)
    res = _run(blind, 20)
    assert res.sensitivity == 0.0 and res.noise_floor == 0.0  # type: ignore[attr-defined]
    # it always waits: optimal at 10+ turns left only
    assert res.share_optimal == pytest.approx(12 / 18)  # type: ignore[attr-defined]


@pytest.mark.slow
def test_a_noisy_blind_policy_scores_zero_within_its_noise_floor() -> None:
    rng = random.Random(3)

    def noisy(points: Sequence[DecisionPoint]) -> list[str]:  # turns left never read
        return [rng.choice("rrruuuuul") for _ in points]

    res = _run(noisy, 300)
    assert res.noise_floor > 0.02  # type: ignore[attr-defined]
    assert abs(res.sensitivity) <= res.noise_floor  # type: ignore[attr-defined]
    assert res.low <= 0.0 <= res.high  # type: ignore[attr-defined]
    probs = [c.probabilities["r"] for c in res.cells]  # type: ignore[attr-defined]
    assert max(probs) - min(probs) < 0.15


@pytest.mark.slow
def test_half_aware_policy_scores_one_half() -> None:
    rng = random.Random(5)
    oracle = frozenlake_oracle_policy(MODEL, moves=MOVE_LETTERS)

    def half(points: Sequence[DecisionPoint]) -> list[str]:
        best = oracle(points)
        return [b if rng.random() < 0.5 else "u" for b in best]

    res = _run(half, 400)
    assert res.low <= 0.5 <= res.high  # type: ignore[attr-defined]
    assert abs(res.sensitivity - 0.5) < 0.06  # type: ignore[attr-defined]


def test_start_points_carry_the_budget_as_turns_left_and_in_the_notice() -> None:
    points = start_points(_tasks(2), [4, 12])
    assert [p.turns_remaining for p in points] == [4, 4, 12, 12]
    assert points[2].messages[-1]["content"].endswith("turn 1/12, 12 left")


def test_refuses_a_state_where_the_budget_does_not_matter() -> None:
    corridor = FrozenLakeModel(("SFFG",), False, 1.0)
    tasks = [
        Task(
            task_id="c", make_env=lambda: CompactFrozenLake(("SFFG",), 1.0, slippery=False), seed=0
        )
    ]
    with pytest.raises(ConfigError, match="does not depend on the budget"):
        budget_sensitivity(
            tasks,
            frozenlake_oracle_policy(corridor, moves=MOVE_LETTERS),
            [4, 8],
            frozenlake_q(corridor),
            parse_move,
            moves=tuple(MOVE_LETTERS),
        )
    with pytest.raises(ConfigError, match="budgets"):
        start_points(tasks, [0])


def test_the_masked_notice_keeps_the_text_and_hides_every_number() -> None:
    for budget in (1, 4, 12):
        (point,) = start_points(_tasks(1), [budget], notice_format="v1-compact-masked")
        notice = point.messages[-1]["content"].rsplit("\n", 1)[-1]
        assert notice == "[budget v1c] turn #/#, # left"
        assert not any(ch.isdigit() for ch in notice.replace("v1c", ""))  # the format id stays
