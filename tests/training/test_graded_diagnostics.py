"""Diagnostics graded against the optimum for the agent's error rate (issue 29 item 4), the
measured error rate, and the recovery analysis (item 6) against known answers."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

pytest.importorskip("numpy")

from budgetmix.environment import Task
from budgetmix.exceptions import ConfigError
from budgetmix.training.diagnostics.action_quality import (
    compare_expected,
    measure_error_rate,
    recovery_analysis,
)
from budgetmix.training.diagnostics.budget_sensitivity import budget_sensitivity
from budgetmix.training.diagnostics.episodes import (
    DecisionPoint,
    Policy,
    frozenlake_q,
    pointwise,
    run_episodes,
    worst_action,
)
from budgetmix.training.diagnostics.voi import exact_model
from budgetmix.training.envs import env_tasks
from budgetmix.training.envs.fault_chain_oracle import (
    CHAIN_MOVES,
    ChainDemonstrator,
    ChainModel,
    chain_q,
    parse_chain_move,
)
from budgetmix.training.envs.frozenlake_compact import CompactFrozenLake, parse_move
from budgetmix.training.envs.frozenlake_oracle import FrozenLakeModel

MODEL = ChainModel()


def _demo(e: float, seed: int, *, plan: float | None = None) -> Policy:
    """The optimum for an agent erring at ``plan`` (default ``e``), executed erring at ``e``."""
    demo = ChainDemonstrator(e, seed, plan_error_rate=plan)
    return pointwise(lambda p: demo.move(MODEL, p.state, p.turns_remaining, p.turn - 1))


def _tasks(n: int) -> list[Task]:
    return env_tasks("fault-chain-compact", range(n), {})


def _sensitivity(policy: Policy, q: object) -> object:
    return budget_sensitivity(
        _tasks(30), policy, list(range(2, 16)), q, parse_chain_move,  # type: ignore[arg-type]
        moves=tuple(CHAIN_MOVES),
    )  # fmt: skip


def test_an_agent_optimal_for_its_error_rate_scores_one_only_against_its_own_optimum() -> None:
    agent = _demo(0.0, 0, plan=0.3)  # the e = 0.3 optimum's intentions, no noise
    own = _sensitivity(agent, chain_q(MODEL, 0.3))
    assert own.flip_action == "g" and own.optimal_budgets == tuple(range(2, 9))  # type: ignore[attr-defined]
    assert own.sensitivity == 1.0 and own.share_optimal == 1.0  # type: ignore[attr-defined]
    assert own.share_optimal_floor == 0.0  # type: ignore[attr-defined]  # deterministic
    assert "noise floor" in own.format()  # type: ignore[attr-defined]
    # graded against the optimum for e = 0.2 (guess with 2-6 turns left), its guesses
    # with 7 and 8 turns count as wrong
    other = _sensitivity(agent, chain_q(MODEL, 0.2))
    assert other.optimal_budgets == tuple(range(2, 7))  # type: ignore[attr-defined]
    assert other.share_optimal == pytest.approx(1 - 2 / 14)  # type: ignore[attr-defined]
    assert other.sensitivity == pytest.approx(1 - 2 / 9)  # type: ignore[attr-defined]


def test_on_the_demo_map_the_agent_optimal_at_e_0_3_scores_zero_against_the_noiseless_one() -> None:
    # issue 29: graded against the noiseless optimum, an agent optimal for its own error
    # rate scores S = 0 (it hurries at every budget); for its own optimum the start move
    # does not depend on the budget at all (the VoI of the demo map is 0 at e = 0.3)
    demo_map = ("SFF", "HFF", "HHG")
    model = FrozenLakeModel(demo_map, True, 0.8)
    tasks = [Task(task_id=f"t{s}", make_env=lambda: CompactFrozenLake(demo_map, 0.8), seed=s)
             for s in range(4)]  # fmt: skip
    q3 = frozenlake_q(model, error_rate=0.3)
    agent = pointwise(lambda p: max("ldru", key=lambda m: q3(p, m)))
    budgets = list(range(2, 22))
    noiseless = budget_sensitivity(tasks, agent, budgets, frozenlake_q(model), parse_move,
                                   moves=("l", "d", "r", "u"))  # fmt: skip
    assert noiseless.sensitivity == 0.0 and noiseless.flip_action == "r"
    assert noiseless.share_optimal == pytest.approx(6 / 18)  # right is optimal at 4-9 only
    with pytest.raises(ConfigError, match="does not depend on the budget"):
        budget_sensitivity(tasks, agent, budgets, q3, parse_move, moves=("l", "d", "r", "u"))


def test_the_optimal_share_of_a_noisy_agent_sits_within_its_noise_floor_of_itself() -> None:
    q = chain_q(MODEL, 0.2)
    one, two = (_sensitivity(_demo(0.2, s), q) for s in (1, 2))
    floor = one.share_optimal_floor  # type: ignore[attr-defined]
    assert 0.02 < floor < 0.2
    assert abs(one.share_optimal - two.share_optimal) < floor  # type: ignore[attr-defined]


def test_hurrying_at_the_start_is_a_mistake_only_against_the_noiseless_optimum() -> None:
    demo_map = ("SFF", "HFF", "HHG")
    model = FrozenLakeModel(demo_map, True, 0.8)
    tasks = [Task(task_id="t", make_env=lambda: CompactFrozenLake(demo_map, 0.8), seed=0)]
    hurry = pointwise(lambda p: "r")
    (noiseless,) = run_episodes(tasks, hurry, 14, q=frozenlake_q(model))
    (own,) = run_episodes(tasks, hurry, 14, q=frozenlake_q(model, error_rate=0.3))
    assert noiseless.mistakes[0] is True and own.mistakes[0] is False
    point = DecisionPoint("t", 0, 1, 14, 14, 0, "", ())
    q3 = frozenlake_q(model, error_rate=0.3)
    assert q3(point, "r") > q3(point, "u") and frozenlake_q(model)(point, "u") > 0.9
    assert exact_model("frozenlake-compact").q_for(0.3)(point, "r") == q3(point, "r")
    with pytest.raises(ConfigError, match="error_rate"):
        frozenlake_q(model, error_rate=2.0)


def _base_points(e: float, n: int, budget: int) -> list[DecisionPoint]:
    q = chain_q(MODEL, e)
    traces = run_episodes(_tasks(n), _demo(e, 7), budget, q=q, moves=tuple(CHAIN_MOVES))
    return [p for t in traces for p in t.points]


@pytest.mark.parametrize("e", [0.1, 0.3])
def test_the_measured_error_rate_of_a_noisy_demonstrator_is_its_rate(e: float) -> None:
    points = _base_points(e, 40, 12)
    got = measure_error_rate(points, _demo(e, 11), lambda x: chain_q(MODEL, x), CHAIN_MOVES)
    assert got.low <= e <= got.high and got.draws > 500
    assert abs(got.rate - e) < 4 * math.sqrt(e * (1 - e) / got.draws)
    exact = measure_error_rate(points, _demo(0.0, 0, plan=e), lambda x: chain_q(MODEL, e),
                               CHAIN_MOVES)  # fmt: skip
    assert exact.rate == 0.0  # graded by its own optimum, the noise-free agent never errs
    noiseless = measure_error_rate(points, _demo(0.0, 0, plan=0.0), lambda x: chain_q(MODEL, x),
                                   CHAIN_MOVES)  # fmt: skip
    assert noiseless.rate == 0.0 and noiseless.points > 100
    with pytest.raises(ConfigError, match="samples"):
        measure_error_rate(points, _demo(e, 1), lambda x: chain_q(MODEL, x), CHAIN_MOVES,
                           samples=0)  # fmt: skip


def test_after_mistake_shares_have_their_own_noise_floor() -> None:
    q = chain_q(MODEL, 0.2)
    points = _base_points(0.2, 30, 12)
    res = compare_expected(points, _demo(0.2, 1), _demo(0.2, 2), q, samples=4,
                           moves=tuple(CHAIN_MOVES))  # fmt: skip
    floor, n = res.noise_floor_after_mistake, res.n_after_mistake
    assert n > 10 and floor is not None and 0.05 < floor < 0.6
    # two independent estimates of the same share: within 4 standard errors of each other
    assert abs(res.a_better_after_mistake - floor) < 4 * math.sqrt(2 * floor * (1 - floor) / n)  # type: ignore[operator]
    assert "noise floor" in res.format()[1]
    best = _demo(0.0, 0, plan=0.2)
    exact = compare_expected(points, best, best, q, samples=2, moves=tuple(CHAIN_MOVES))
    assert exact.noise_floor_after_mistake == 0.0 == exact.a_better_after_mistake


def _rl(policies: Sequence[Policy]) -> dict[str, Policy]:
    return {f"seed{i}": p for i, p in enumerate(policies)}


def test_recovery_analysis_known_answers() -> None:
    q = chain_q(MODEL, 0.2)
    points = _base_points(0.2, 30, 12)
    moves = tuple(CHAIN_MOVES)
    worst = pointwise(worst_action(q, moves))
    best = _demo(0.0, 0, plan=0.2)
    # the optimum against the worst move: better at every non-tied state, before and after
    res = recovery_analysis(points, worst, _rl([best, best]), q, samples=1, moves=moves)
    assert (res.all_states, res.after_mistake, res.gap) == (1.0, 1.0, 0.0)
    assert res.noise_floor == 0.0 and res.noise_floor_after_mistake == 0.0
    assert res.all_low == res.all_high == 1.0  # no spread over seeds
    # the base against itself: each share at its own noise floor (the floors differ: the
    # states right after a mistake have fewer ties, so compare a share with its floor)
    same = recovery_analysis(points, _demo(0.2, 3), _rl([_demo(0.2, s) for s in (4, 5, 6)]), q,
                             samples=4, moves=moves)  # fmt: skip
    floor, post = same.noise_floor, same.noise_floor_after_mistake
    assert floor is not None and post is not None
    assert abs(same.all_states - floor) < 4 * math.sqrt(2 * floor * (1 - floor) / 296)
    n = same.per_seed[0].n_after_mistake
    assert abs(same.after_mistake - post) < 4 * math.sqrt(2 * post * (1 - post) / n)
    assert len(same.per_seed) == 3 and "noise floor" in same.format()[0]
    assert set(same.to_dict()) >= {"all_states", "after_mistake", "gap", "per_seed", "seeds"}
    with pytest.raises(ConfigError, match="rl"):
        recovery_analysis(points, worst, {}, q)
