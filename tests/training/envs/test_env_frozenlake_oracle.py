"""The exact value-iteration oracle: hand-checked values, gymnasium parity, Monte Carlo."""

from __future__ import annotations

import numpy as np
import pytest
from budgetmix.exceptions import ConfigError
from budgetmix.training.envs import (
    FrozenLakeModel,
    aware_success_curve,
    budget_gap,
    find_ceiling,
    finite_horizon_values,
    no_limit_success,
    policy_success_curve,
    stationary_policy,
)
from gymnasium.envs.toy_text.frozen_lake import MAPS, FrozenLakeEnv, generate_random_map


@pytest.mark.parametrize("success_rate", [1 / 3, 0.8])
@pytest.mark.parametrize("desc", [MAPS["4x4"], generate_random_map(5, 0.8, seed=3)])
def test_transitions_match_gymnasium(desc: list[str], success_rate: float) -> None:
    model = FrozenLakeModel(tuple(desc), True, success_rate)
    gym = FrozenLakeEnv(desc=desc, is_slippery=True, success_rate=success_rate)
    expected = np.zeros_like(model.transitions)
    for s in range(model.n_states):
        for a in range(4):
            for p, s2, _, _ in gym.P[s][a]:
                expected[s, a, s2] += p
    assert np.allclose(model.transitions, expected)


def test_hand_checked_corridor() -> None:
    # "SG": right reaches G with prob p, else (slip up/down into the border) stays;
    # up stays with prob p and reaches G only by slipping right, (1 - p) / 2.
    p = 0.6
    model = FrozenLakeModel(("SG",), True, p)
    v, q = finite_horizon_values(model, 4)
    for t in range(5):
        assert v[t, 0] == pytest.approx(1 - (1 - p) ** t)
        assert v[t, 1] == 1.0
    assert q[1, 0, 2] == pytest.approx(p)  # right
    assert q[1, 0, 3] == pytest.approx((1 - p) / 2)  # up
    assert q[1, 0, 0] == 0.0  # left: its slips (down, up) hit the border too
    assert q[1, 0, 1] == pytest.approx((1 - p) / 2)  # down: slips right with (1 - p) / 2
    assert q[2, 0, 3] == pytest.approx((1 - p) / 2 + (1 - (1 - p) / 2) * p)
    assert no_limit_success(model) == pytest.approx(1.0)
    # 90% of 1.0: 1 - 0.4^t >= 0.9 first at t = 3 (0.936; t = 2 gives 0.84).
    assert find_ceiling(model) == 3


def test_hand_checked_risky_shortcut_vs_safe_detour() -> None:
    # Not slippery: S at the top left, the goal two cells right; no holes.
    model = FrozenLakeModel(("SFG", "FFF"), False)
    v, _ = finite_horizon_values(model, 3)
    assert list(v[:, model.start]) == [0.0, 0.0, 1.0, 1.0]
    curve = policy_success_curve(model, stationary_policy(model), 3)
    assert list(curve) == [0.0, 0.0, 1.0, 1.0]


def test_aware_dominates_blind_and_curves_are_monotone() -> None:
    model = FrozenLakeModel(tuple(MAPS["8x8"]), True, 0.8)
    aware = aware_success_curve(model, 60)
    blind = policy_success_curve(model, stationary_policy(model), 60)
    assert np.all(np.diff(aware) >= -1e-12)
    assert np.all(np.diff(blind) >= -1e-12)
    assert np.all(aware >= blind - 1e-12)
    assert aware[-1] <= no_limit_success(model) + 1e-9


def test_ceiling_definition() -> None:
    model = FrozenLakeModel(tuple(MAPS["4x4"]), True, 1 / 3)
    c = find_ceiling(model)
    best = no_limit_success(model)
    curve = aware_success_curve(model, c)
    assert curve[c] >= 0.9 * best - 1e-9 > curve[c - 1]


def test_exact_value_matches_monte_carlo_in_gymnasium() -> None:
    desc = MAPS["4x4"]
    horizon = 8
    model = FrozenLakeModel(tuple(desc), True, 0.8)
    _, q = finite_horizon_values(model, horizon)
    gym = FrozenLakeEnv(desc=desc, is_slippery=True, success_rate=0.8)
    n, wins = 3000, 0
    for ep in range(n):
        s, _ = gym.reset(seed=ep)
        for t in range(horizon, 0, -1):
            s, r, term, _, _ = gym.step(int(q[t, s].argmax()))  # type: ignore[no-untyped-call]
            if term:
                wins += int(r > 0)
                break
    exact = aware_success_curve(model, horizon)[horizon]
    se = (exact * (1 - exact) / n) ** 0.5
    assert abs(wins / n - exact) < 4 * se


def test_paper_row_gap_is_positive_at_a_quarter_of_the_ceiling() -> None:
    # PAPER.md: success_rate 0.8, random 5x5 maps: the aware optimum beats the best
    # budget-blind policy by about 12 points at 25% of the ceiling (we check > 2).
    gaps = []
    for seed in range(12):
        model = FrozenLakeModel(tuple(generate_random_map(5, 0.8, seed=seed)), True, 0.8)
        gaps.append(budget_gap(model).gaps)
    mean = np.mean(gaps, axis=0)
    assert mean[0] > 0.02
    assert np.all(np.asarray(gaps) >= -1e-9)


def test_budget_gap_with_several_gammas_is_smaller() -> None:
    model = FrozenLakeModel(tuple(generate_random_map(5, 0.8, seed=1)), True, 0.8)
    one = budget_gap(model)
    many = budget_gap(model, gammas=(0.9, 0.99, 0.999))
    assert one.ceiling == many.ceiling
    assert all(m <= o + 1e-12 for m, o in zip(many.gaps, one.gaps, strict=True))


def test_model_validation() -> None:
    with pytest.raises(ConfigError, match="desc"):
        FrozenLakeModel(("SF", "F"))
    with pytest.raises(ConfigError, match="desc"):
        FrozenLakeModel(("SF", "FF"))
    with pytest.raises(ConfigError, match="success_rate"):
        FrozenLakeModel(("SG",), True, -0.1)
    with pytest.raises(ConfigError, match="goal"):
        find_ceiling(FrozenLakeModel(("SHG",), False))
    with pytest.raises(ConfigError, match="policy"):
        policy_success_curve(FrozenLakeModel(("SG",)), [0], 3)


def test_noisy_aware_curve_known_answers() -> None:
    import numpy as np
    from budgetmix.training.envs.frozenlake_oracle import (
        aware_success_curve,
        noisy_aware_success_curve,
    )

    demo = FrozenLakeModel(("SFF", "HFF", "HHG"), True, 0.8)
    assert np.allclose(noisy_aware_success_curve(demo, 21, 0.0), aware_success_curve(demo, 21))
    # one step from the goal, no slip: every turn the move succeeds unless it errs
    line = FrozenLakeModel(("SG",), False)
    for e in (0.1, 0.3):
        curve = noisy_aware_success_curve(line, 5, e)
        assert np.allclose(curve, [1 - e**t if t else 0.0 for t in range(6)])


def test_waiting_at_the_start_pays_only_for_an_agent_that_rarely_errs() -> None:
    from budgetmix.training.envs.frozenlake_oracle import noisy_aware_success_curve

    demo = FrozenLakeModel(("SFF", "HFF", "HHG"), True, 0.8)
    right = 2
    for t in (14, 21):
        exact = noisy_aware_success_curve(demo, 21, 0.0)
        hurried = noisy_aware_success_curve(demo, 21, 0.0, start_move=right)
        assert exact[t] > hurried[t] + 0.03  # the optimum waits at the start here
        noisy = noisy_aware_success_curve(demo, 21, 0.3)
        noisy_hurried = noisy_aware_success_curve(demo, 21, 0.3, start_move=right)
        assert noisy_hurried[t] > noisy[t] + 0.1  # with 30% errors hurrying is better


def test_noisy_aware_curve_rejects_bad_input() -> None:
    from budgetmix.training.envs.frozenlake_oracle import noisy_aware_success_curve

    demo = FrozenLakeModel(("SFF", "HFF", "HHG"), True, 0.8)
    with pytest.raises(ConfigError, match="error_rate"):
        noisy_aware_success_curve(demo, 5, 1.5)
    with pytest.raises(ConfigError, match="start_move"):
        noisy_aware_success_curve(demo, 5, 0.1, start_move=7)


def test_the_crossover_at_the_ceiling_lies_between_3_and_5_percent_errors() -> None:
    from budgetmix.training.envs.frozenlake_oracle import noisy_aware_success_curve

    demo = FrozenLakeModel(("SFF", "HFF", "HHG"), True, 0.8)

    def wait_gain(e: float) -> float:
        waits = noisy_aware_success_curve(demo, 14, e)[14]
        return float(waits - noisy_aware_success_curve(demo, 14, e, start_move=2)[14])

    assert wait_gain(0.03) > 0 > wait_gain(0.05)  # docs: 3.5% at T=14
