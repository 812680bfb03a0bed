"""The VoI gate: the issue's table, brute force over blind policies, closed forms, the gate."""

from __future__ import annotations

import numpy as np
import pytest
from _mdp_brute import all_tables, success_within
from budgetmix.exceptions import ConfigError
from budgetmix.training.diagnostics.voi import env_voi, exact_model, gate, voi_table
from budgetmix.training.envs.faulty_tools_oracle import ToolsModel
from budgetmix.training.envs.frozenlake_oracle import FrozenLakeModel

SECOND_MAP = ("SFFF", "FFHF", "FFHH", "FFFG")


def _points(env: str, e: float, **kwargs: object) -> list[float]:
    table = env_voi(env, e, env_kwargs=kwargs)
    return [round(r.voi * 100, 1) + 0.0 for r in table.rows]


def test_the_issue_table_of_the_old_designs() -> None:
    # issue 29: demo map 0/0/0/0 at e = 0.3 and 0.05, 0/0/0.5/3.7 at e = 0; second map
    # 0/0/0/0.8 at e = 0.3; faulty-tools-compact 0/0/0/0 at e = 0.3 (noiseless ceilings)
    assert _points("frozenlake-compact", 0.3) == [0.0, 0.0, 0.0, 0.0]
    assert _points("frozenlake-compact", 0.05) == [0.0, 0.0, 0.0, 0.0]
    assert _points("frozenlake-compact", 0.0) == [0.0, 0.0, 0.5, 3.7]
    assert _points("frozenlake-compact", 0.3, desc=SECOND_MAP) == [0.0, 0.0, 0.0, 0.8]
    assert _points("faulty-tools-compact", 0.3) == [0.0, 0.0, 0.0, 0.0]
    demo = env_voi("frozenlake-compact", 0.3)
    assert demo.ceiling == 14 and [r.budget for r in demo.rows] == [4, 7, 10, 14]


def test_on_the_demo_map_one_memoryless_policy_is_as_good_as_knowing_the_budget() -> None:
    # the issue: right, right, down, right, down reaches the aware optimum at 25-100%
    model = FrozenLakeModel(("SFF", "HFF", "HHG"), True, 0.8)
    r, d = 2, 1
    policy = [r, r, d, 0, r, d, 0, 0, 0]  # cells A B C / D E F / G H I (holes, goal: any)
    noisy = model.mdp.with_errors(0.3)
    from budgetmix.training.envs.mdp import turns_left_success_curve

    curve = turns_left_success_curve(noisy, policy, 14)
    for row in env_voi("frozenlake-compact", 0.3).rows:
        assert curve[row.budget] == pytest.approx(row.aware, abs=1e-12)


def _brute(mdp: object, budgets: list[int]) -> tuple[list[float], list[float]]:
    """Per budget: the best success of any policy for that budget alone (aware), and the
    per-budget success of the policy with the best mean over the budgets (blind)."""
    top = max(budgets)
    curves = [
        success_within(mdp, lambda t, s, tb=tb: int(tb[t, s]), top)  # type: ignore[arg-type]
        for tb in all_tables(mdp, top)  # type: ignore[arg-type]
    ]
    aware = [max(c[b] for c in curves) for b in budgets]
    best = max(curves, key=lambda c: sum(c[b] for b in budgets))
    return aware, [best[b] for b in budgets]


@pytest.mark.parametrize(
    ("desc", "slip", "e"), [(("SFG",), 0.8, 0.0), (("SFG",), 0.8, 0.3), (("SF", "HG"), 0.6, 0.1)]
)
def test_matches_brute_force_over_blind_policies_on_small_maps(
    desc: tuple[str, ...], slip: float, e: float
) -> None:
    table = env_voi("frozenlake-compact", e, env_kwargs={"desc": desc, "success_rate": slip},
                    ceiling=3)  # fmt: skip
    budgets = [r.budget for r in table.rows]
    assert budgets == [1, 2, 2, 3]  # round(0.75) = 1, round(2.25) = 2 (the sampler's)
    model = FrozenLakeModel(desc, True, slip)
    aware, blind = _brute(model.mdp.with_errors(e), budgets)
    assert [r.aware for r in table.rows] == pytest.approx(aware, abs=1e-12)
    assert table.blind_mean == pytest.approx(np.mean(blind), abs=1e-12)
    assert [r.blind for r in table.rows] == pytest.approx(blind, abs=1e-12)


@pytest.mark.parametrize(("fault_p", "e"), [(0.0, 0.0), (0.3, 0.2), (0.2, 0.3)])
def test_matches_brute_force_on_a_small_tool_chain(fault_p: float, e: float) -> None:
    kwargs = {"hops": 1, "fault_p": fault_p, "guess_p": 0.3}
    table = env_voi("faulty-tools-compact", e, env_kwargs=kwargs, ceiling=4)
    aware, blind = _brute(ToolsModel(**kwargs).mdp.with_errors(e), [1, 2, 3, 4])  # type: ignore[arg-type]
    assert [r.aware for r in table.rows] == pytest.approx(aware, abs=1e-12)
    assert [r.blind for r in table.rows] == pytest.approx(blind, abs=1e-12)
    assert all(r.voi >= -1e-12 for r in table.rows)


@pytest.mark.parametrize("g", [0.1, 0.25, 0.4])
def test_closed_form_one_link_no_faults(g: float) -> None:
    # T = 1: guess (g) if aware; T = 2: look up, answer (1). The blind policy must pick
    # one first move for both: look up (mean 1/2) beats guessing (mean g) for g < 1/2.
    model = ToolsModel(1, 0.0, g)
    table = voi_table(model.mdp, error_rate=0.0, ceiling=2, fractions=(0.5, 1.0))
    got = [(r.budget, r.aware, r.blind) for r in table.rows]
    assert got == [(1, pytest.approx(g), 0.0), (2, 1.0, 1.0)]
    assert table.row(0.5).voi == pytest.approx(g) and table.blind_mean == 0.5
    # weights move the blind policy: with T = 1 weighted 0.9 guessing wins (0.9 g + 0.1 g = g)
    heavy = voi_table(model.mdp, error_rate=0.0, ceiling=2, fractions=(0.5, 1.0),
                      weights=(0.9, 0.1))  # fmt: skip
    assert heavy.blind_mean == pytest.approx(max(g, 0.1))
    if g > 0.1:
        assert heavy.row(1.0).voi == pytest.approx(1 - g)


def test_the_gate_passes_and_refuses_with_the_failing_budget_named() -> None:
    model = ToolsModel(1, 0.0, 0.25)
    table = voi_table(model.mdp, error_rate=0.0, ceiling=4, fractions=(0.25, 0.5, 1.0))
    verdict = gate(table)  # T = 1: VoI 25 points, T = 2: look up then answer at both: 0
    assert not verdict.passed and verdict.voi[0] == pytest.approx(0.25)
    assert "0.0 at 50%" in verdict.reason and "25%" not in verdict.reason
    assert gate(table, fractions=(0.25,)).passed
    assert not gate(table, threshold=0.3, fractions=(0.25,)).passed
    assert gate(env_voi("frozenlake-compact", 0.3)).passed is False
    with pytest.raises(ConfigError, match="fraction"):
        gate(table, fractions=(0.75,))


def test_bad_designs_name_the_field() -> None:
    with pytest.raises(ConfigError, match="env"):
        exact_model("humaneval")
    with pytest.raises(ConfigError, match="error_rate"):
        env_voi("frozenlake-compact", 1.5)
    with pytest.raises(ConfigError, match="env_kwargs"):
        env_voi("faulty-tools-compact", 0.1, env_kwargs={"links": 3})
    with pytest.raises(ConfigError, match="hops"):
        env_voi("faulty-tools-compact", 0.1, env_kwargs={"hops": 0})
    # the demonstrator's options are accepted and ignored
    same = env_voi("faulty-tools-compact", 0.3, env_kwargs={"demo_gamma": 0.9})
    assert same.to_dict() == env_voi("faulty-tools-compact", 0.3).to_dict()
