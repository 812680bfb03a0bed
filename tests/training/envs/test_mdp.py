"""The one MDP core: brute-force enumeration of policies on small models, closed forms."""

from __future__ import annotations

import numpy as np
import pytest
from _mdp_brute import all_tables, success_within
from budgetmix.exceptions import ConfigError
from budgetmix.training.envs.mdp import (
    TabularMDP,
    blind_optimum,
    elapsed_success_curve,
    error_transitions,
    find_ceiling,
    finite_horizon_values,
    turns_left_success_curve,
)


def _random_mdp(seed: int, live: int = 3, actions: int = 2) -> TabularMDP:
    """``live`` ordinary states, then a success and a failure state (absorbing)."""
    rng = np.random.default_rng(seed)
    n = live + 2
    p = np.zeros((n, actions, n))
    for s in range(live):
        for a in range(actions):
            row = rng.random(n) * (rng.random(n) < 0.7)
            row[s] += 0.1
            p[s, a] = row / row.sum()
    p[live, :, live] = p[live + 1, :, live + 1] = 1.0
    success = np.arange(n) == live
    return TabularMDP(p, success, np.arange(n) >= live, 0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_backward_induction_is_the_best_of_all_policies_per_budget(seed: int) -> None:
    mdp = _random_mdp(seed)
    horizon = 3
    v, q = finite_horizon_values(mdp, horizon)
    assert v.shape == (4, 5) and q.shape == (4, 5, 2)  # (V, Q), in that order
    tables = all_tables(mdp, horizon)
    for budget in range(horizon + 1):
        best = max(
            success_within(mdp, lambda t, s, tb=tb: int(tb[t, s]), budget)[budget]
            for tb in tables
        )
        assert v[budget, mdp.start] == pytest.approx(best, abs=1e-12)
    assert np.allclose(v[1:], q[1:].max(axis=2))
    assert list(v[0]) == [0, 0, 0, 1, 0] and list(q[2, 3]) == [1, 1] and list(q[2, 4]) == [0, 0]


@pytest.mark.parametrize(("seed", "budgets", "weights"), [
    (3, (1, 2, 3), None), (4, (1, 3), (0.2, 0.8)), (5, (2, 3), (1.0, 1.0)),
])  # fmt: skip
def test_the_blind_optimum_is_the_best_of_all_elapsed_turn_policies(
    seed: int, budgets: tuple[int, ...], weights: tuple[float, ...] | None
) -> None:
    mdp = _random_mdp(seed).with_errors(0.2)
    w = np.ones(len(budgets)) if weights is None else np.asarray(weights)
    w = w / w.sum()
    top = max(budgets)
    scored = []
    for tb in all_tables(mdp, top):
        curve = success_within(mdp, lambda t, s, tb=tb: int(tb[t, s]), top)
        scored.append((sum(wi * curve[b] for wi, b in zip(w, budgets, strict=True)), curve))
    best_mean = max(m for m, _ in scored)
    got = blind_optimum(mdp, budgets, weights)
    assert got.mean == pytest.approx(best_mean, abs=1e-12)
    assert np.allclose(got.curve, success_within(mdp, lambda t, s: int(got.actions[t, s]), top))
    # the per-budget split: the one of the maximisers (unique on these random models)
    winners = [c for m, c in scored if m > best_mean - 1e-12]
    assert any(np.allclose(got.curve, c) for c in winners)
    aware = finite_horizon_values(mdp, top)[0][:, mdp.start]
    assert all(aware[b] >= got.curve[b] - 1e-12 for b in budgets)


def test_a_blind_optimum_for_one_budget_is_the_aware_optimum() -> None:
    mdp = _random_mdp(7).with_errors(0.1)
    v, _ = finite_horizon_values(mdp, 4)
    for b in (1, 2, 4):
        assert blind_optimum(mdp, (b,)).mean == pytest.approx(v[b, mdp.start], abs=1e-12)


def _guess_or_look(guess_p: float) -> TabularMDP:
    """0 --look--> 1 --answer--> success (2 turns); guess: success with guess_p now.
    Actions: 0 look, 1 answer, 2 guess; states 0, 1, success 2, failure 3."""
    p = np.zeros((4, 3, 4))
    p[0, 0, 1] = 1.0
    p[0, 1, 3] = 1.0
    p[1, 0, 1] = 1.0
    p[1, 1, 2] = 1.0
    for s in (0, 1):
        p[s, 2, 2], p[s, 2, 3] = guess_p, 1 - guess_p
    p[2, :, 2] = p[3, :, 3] = 1.0
    return TabularMDP(p, np.arange(4) == 2, np.arange(4) >= 2, 0)


@pytest.mark.parametrize("e", [0.0, 0.1, 0.3])
def test_closed_form_value_of_knowing_the_budget(e: float) -> None:
    g, o = 0.2, e / 2  # o: each of the two other actions
    mdp = _guess_or_look(g).with_errors(e)
    v1_0 = (1 - e) * g  # one turn left, nothing found: guess
    v1_1 = 1 - e + o * g  # one turn left, link found: answer (an error may still guess right)
    look2 = (1 - e) * v1_1 + o * g
    guess2 = (1 - e) * g + o * v1_1
    v, _ = finite_horizon_values(mdp, 2)
    assert (v[1, 0], v[1, 1]) == (pytest.approx(v1_0), pytest.approx(v1_1))
    assert v[2, 0] == pytest.approx(max(look2, guess2, o * v1_1 + o * g))
    # budget-blind over T in {1, 2}: look first (T=1: o g, T=2: look2) or guess first
    look_first, guess_first = (o * g, look2), (v1_0, guess2)
    blind = blind_optimum(mdp, (1, 2))
    best = max(look_first, guess_first, key=sum)
    assert blind.mean == pytest.approx(sum(best) / 2)
    assert np.allclose(blind.curve[1:], best)
    if e == 0.0:  # the blind policy looks first: it loses g at T = 1, the aware one does not
        assert best == look_first and (v[1, 0], v[2, 0]) == (pytest.approx(g), 1.0)


def test_the_error_model_takes_a_random_other_action() -> None:
    p = np.zeros((3, 3, 3))
    for a in range(3):
        p[:, a, a] = 1.0
    pe = error_transitions(p, 0.3)
    assert np.allclose(pe[0], [[0.7, 0.15, 0.15], [0.15, 0.7, 0.15], [0.15, 0.15, 0.7]])
    assert np.allclose(error_transitions(p[:, :2, :], 1.0)[0, 0], [0, 1, 0])
    assert np.array_equal(error_transitions(p, 0.0), p)
    with pytest.raises(ConfigError, match="error_rate"):
        error_transitions(p, 1.2)
    with pytest.raises(ConfigError, match="error_rate"):
        error_transitions(p[:, :1, :], 0.1)


def test_line_closed_form_and_curves_by_turns_left_and_elapsed_agree() -> None:
    # one move from success; every other action stays: success within T is 1 - e^T
    p = np.zeros((2, 4, 2))
    p[0, :, 0] = 1.0
    p[0, 2] = [0.0, 1.0]
    p[1, :, 1] = 1.0
    mdp = TabularMDP(p, np.array([False, True]), np.array([False, True]), 0).with_errors(0.3)
    want = [1 - 0.3**t if t else 0.0 for t in range(6)]
    assert np.allclose(finite_horizon_values(mdp, 5)[0][:, 0], want)
    assert np.allclose(turns_left_success_curve(mdp, [2, 0], 5), want)
    assert np.allclose(elapsed_success_curve(mdp, [2, 0], 5), want)
    assert np.allclose(blind_optimum(mdp, (1, 3, 5)).curve, want)
    assert find_ceiling(mdp, 0.9) == 2  # 1 - 0.3^2 = 0.91


def test_bad_models_and_priors_name_the_field() -> None:
    good = _random_mdp(0)
    with pytest.raises(ConfigError, match="transitions"):
        TabularMDP(np.ones((2, 1, 3)), np.zeros(2, bool), np.zeros(2, bool))
    with pytest.raises(ConfigError, match="distribution"):
        TabularMDP(np.full((2, 1, 2), 0.4), np.zeros(2, bool), np.zeros(2, bool))
    with pytest.raises(ConfigError, match="success"):
        TabularMDP(good.transitions, good.success, np.zeros(5, bool))
    with pytest.raises(ConfigError, match="start"):
        TabularMDP(good.transitions, good.success, good.terminal, 9)
    with pytest.raises(ConfigError, match="horizon"):
        finite_horizon_values(good, -1)
    with pytest.raises(ConfigError, match="budgets"):
        blind_optimum(good, ())
    with pytest.raises(ConfigError, match="budgets"):
        blind_optimum(good, (0, 2))
    with pytest.raises(ConfigError, match="weights"):
        blind_optimum(good, (1, 2), (1.0,))
    with pytest.raises(ConfigError, match="actions"):
        elapsed_success_curve(good, [[0, 0, 0, 0, 0]], 2)
    with pytest.raises(ConfigError, match="actions"):
        turns_left_success_curve(good, [0, 0, 5, 0, 0], 2)
