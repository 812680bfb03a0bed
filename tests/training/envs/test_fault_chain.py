"""fault-chain-compact: the exact model against the real environment (brute force, Monte Carlo),
non-terminal mistakes, the VoI of the design, the demonstrators, the registry."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
from budgetmix.environment import EnvStateError
from budgetmix.training.diagnostics.episodes import DecisionPoint, pointwise, run_episodes
from budgetmix.training.diagnostics.voi import env_voi, gate
from budgetmix.training.envs import env_spec, env_tasks, make_env
from budgetmix.training.envs.fault_chain_compact import CompactFaultChain
from budgetmix.training.envs.fault_chain_oracle import (
    BROKEN,
    CHAIN_MOVES,
    HELD,
    OK,
    ChainDemonstrator,
    ChainModel,
    chain_ceiling,
    chain_q,
    parse_chain_move,
    repair_headroom,
)
from budgetmix.training.envs.mdp import blind_optimum, finite_horizon_values

KW = {"hops": 2, "fault_p": 0.3, "guess_p": 0.4}
MOVES = [*CHAIN_MOVES, "??"]  # every move and a reply that is none


class _Fixed:
    """A stand-in generator whose every draw is ``x`` (forces one outcome)."""

    def __init__(self, x: float) -> None:
        self.x = x

    def random(self) -> float:
        return self.x


LOW, HIGH = _Fixed(0.0), _Fixed(1.0 - 1e-12)  # a fault / a right guess; no fault / wrong


def _outcomes(env: CompactFaultChain, move: str) -> list[tuple[float, CompactFaultChain]]:
    """Every outcome of ``move`` on the real environment: (probability, env after). A lookup
    draws a fault, an answer a guess; the draws are forced through stand-in generators."""
    m = env.model
    draws = {"n": ("_faults", m.fault_p), "a": ("_guesses", m.guess_p)}
    name, p = draws.get(move, ("_faults", 0.0))
    out = []
    for forced, prob in ((LOW, p), (HIGH, 1 - p)):
        if prob == 0:
            continue
        e = copy.deepcopy(env)
        setattr(e, name, forced)
        e.step(move)
        out.append((prob, e))
    return out


def _taken(env: CompactFaultChain, move: str, k: int, e: float) -> float:
    """Success of taking ``move`` now with ``k`` turns, then acting as :func:`_brute`."""
    return sum(p * _brute(after, k - 1, e) for p, after in _outcomes(env, move))


def _brute(env: CompactFaultChain, k: int, e: float = 0.0) -> float:
    """Expectimax over the real environment: the agent intends a move and, with
    probability ``e``, takes one of the three other moves instead."""
    if k == 0 or env.done:
        return float(env.success)
    taken = [_taken(env, move, k, e) for move in CHAIN_MOVES]
    return max((1 - e) * v + e / 3 * (sum(taken) - v) for v in taken)


@pytest.mark.parametrize("e", [0.0, 0.2])
def test_the_exact_model_is_the_real_environment_by_brute_force(e: float) -> None:
    model = ChainModel(**KW)
    v, _ = finite_horizon_values(model.mdp.with_errors(e), 4)
    env = CompactFaultChain(**KW)
    env.reset(0)
    for k in range(5):
        assert _brute(env, k, e) == pytest.approx(v[k][0], abs=1e-12), k
    # from a broken chain with a link found, and with a guess in hand
    for links, mode, moves in ((1, BROKEN, "n??"), (1, HELD, "ng")):
        env = CompactFaultChain(**KW)
        env.reset(0)
        env._faults = HIGH  # type: ignore[assignment]
        for m in moves:
            env.step(m)
        assert env.state == (links, mode)
        for k in range(4):
            want = v[k][model.index(links, mode)]
            assert _brute(env, k, e) == pytest.approx(want, abs=1e-12), (links, mode, k)


def test_the_q_function_is_the_brute_force_value_of_each_move_at_the_error_rate() -> None:
    model = ChainModel(**KW)
    env = CompactFaultChain(**KW)
    env.reset(0)
    q = chain_q(model, 0.2)
    point = DecisionPoint("t", 0, 1, 4, 4, env.state, "", ())
    for move in MOVES:  # take this move, then continue as the optimum for e = 0.2
        assert q(point, move) == pytest.approx(_taken(env, move, 4, 0.2), abs=1e-12), move


def test_no_single_move_ends_an_episode_except_an_answer_with_a_value() -> None:
    model = ChainModel()
    p, term = model.mdp.transitions, model.mdp.terminal
    for links in range(model.hops + 1):
        for mode in (OK, HELD, BROKEN):
            if mode == HELD and links == model.hops:
                continue
            s = model.index(links, mode)
            for a, letter in enumerate(CHAIN_MOVES):
                ends = p[s, a, term].sum()
                may_end = letter == "a" and mode != BROKEN and (mode == HELD or links == 6)
                assert (ends > 0) == may_end, (links, mode, letter)


def test_the_designs_value_of_knowing_the_budget_passes_the_gate_at_both_error_rates() -> None:
    got = {}
    for e in (0.2, 0.3):
        table = env_voi("fault-chain-compact", e)
        assert table.ceiling == chain_ceiling(ChainModel(), e)
        assert table.ceiling_rule == "at the error rate"
        got[e] = [round(r.voi * 100, 1) for r in table.rows]
        assert gate(table).passed, gate(table).reason
    assert got == {0.2: [26.1, 16.3, 4.2, 2.6], 0.3: [24.3, 11.2, 2.4, 1.7]}
    # noiseless: look up until complete, then answer; P(6 of T - 1 lookups go through) first
    # reaches 90% at T = 10 (0.914; 0.797 at T = 9, where no guess beats a lookup)
    tail = [sum(math.comb(n, i) * 0.8**i * 0.2 ** (n - i) for i in range(6, n + 1)) for n in (8, 9)]
    assert tail[0] < 0.9 < tail[1]
    assert [chain_ceiling(ChainModel(), e) for e in (0.0, 0.2, 0.3)] == [10, 15, 19]


def test_the_gate_holds_for_every_error_rate_from_0_10_to_0_35() -> None:
    lowest = min(
        min(r.voi for r in env_voi("fault-chain-compact", i / 100).rows[:2]) for i in range(10, 36)
    )
    assert round(lowest * 100, 1) == 11.2  # docs/experiment.md: at 50% for e = 0.3


def _rate(demo: ChainDemonstrator, budget: int, n: int) -> float:
    model = ChainModel(**KW)
    policy = pointwise(lambda p: demo.move(model, p.state, p.turns_remaining, p.turn - 1))
    traces = run_episodes(env_tasks("fault-chain-compact", range(n), KW), policy, budget)
    return sum(t.success for t in traces) / n


def test_the_noisy_demonstrators_score_their_exact_values_on_the_real_environment() -> None:
    model, e, n = ChainModel(**KW), 0.2, 1500
    noisy = model.mdp.with_errors(e)
    budgets = [1, 2, 3, 4]  # BudgetMix at fractions of a ceiling of 4
    aware_exact = finite_horizon_values(noisy, 4)[0][4][0]
    blind_exact = blind_optimum(noisy, budgets).curve[2]
    aware = _rate(ChainDemonstrator(e, 1), 4, n)
    blind = _rate(ChainDemonstrator(e, 2, budget_blind=True, ceiling=4), 2, n)
    for rate, exact in ((aware, aware_exact), (blind, blind_exact)):
        assert abs(rate - exact) < 4 * math.sqrt(exact * (1 - exact) / n), (rate, exact)


def test_the_demonstrators_err_at_their_rate_and_the_blind_one_ignores_the_budget() -> None:
    model = ChainModel()
    demo = ChainDemonstrator(0.3, 1)
    moves = [demo.move(model, (0, OK), 12, 0) for _ in range(3000)]
    assert abs(moves.count("n") / 3000 - 0.7) < 0.03
    assert ChainDemonstrator(0.0, 0).move(model, (0, OK), 2, 0) == "g"  # no chain fits
    assert ChainDemonstrator(0.0, 0).move(model, (0, HELD), 1, 1) == "a"
    assert ChainDemonstrator(0.0, 0).move(model, (3, BROKEN), 9, 3) == "r"
    blind = ChainDemonstrator(0.0, 0, budget_blind=True)
    assert {blind.move(model, (0, OK), k, 0) for k in range(1, 30)} == {"n"}
    with pytest.raises(Exception, match="fault-chain-compact"):
        demo(type("R", (), {"env": make_env("faulty-tools-compact"), "state": None})())


def test_text_labels_and_the_registry() -> None:
    env = make_env("fault-chain-compact", demo_budget_aware=True, demo_gamma=0.9, **KW)
    assert isinstance(env, CompactFaultChain)
    with pytest.raises(EnvStateError):
        env.step("n")
    assert env.reset(3) == "A A A A A A"
    env._faults = LOW  # type: ignore[assignment]
    r = env.step("n")
    assert r.label.mistake == "tool_error" and r.observation == "A A A A A A !"
    r = env.step("a")  # an answer with a pointer breaks the chain; the episode goes on
    assert not r.done and r.label.mistake == "invalid_tool_arguments" and env.state == (0, BROKEN)
    assert r.observation == "A A A A A A x x x x x x"  # the mode six times, like the links
    r = env.step("g")
    assert r.label.mistake == "env_action_failed" and env.state == (0, BROKEN)
    r = env.step("r")
    assert r.label.progress and env.state == (0, OK)
    r = env.step("g")
    assert env.state == (0, HELD) and r.observation == "A A A A A A * * * * * *"
    assert env.step("n").observation == "A A A A A A * * * * * * !"  # a fault keeps the guess
    env.step("r")
    r = env.step("zzz")
    assert not r.label.valid and r.label.mistake == "model_format_error" and env.mode == BROKEN
    assert [parse_chain_move(t) for t in ("n", " R ", "a", "guess", "x")] == [0, 1, 2, 3, None]
    agent = env_spec("fault-chain-compact").make_demo_agent({**KW, "demo_ceiling": 4}, 0.0, 3)
    assert isinstance(agent, ChainDemonstrator) and agent.budget_blind and agent.ceiling == 4
    assert np.allclose(ChainModel().mdp.transitions.sum(axis=2), 1.0)


def test_repair_headroom_is_the_success_of_recovered_episodes_on_the_real_environment() -> None:
    model, e, budget, n = ChainModel(), 0.2, 11, 1500
    assert repair_headroom(model, 0.0, [2, 5, 8, 10]) == [0.0, 0.0, 0.0, 0.0]  # never breaks
    (exact,) = repair_headroom(model, e, [budget])
    demo = ChainDemonstrator(e, 5)
    policy = pointwise(lambda p: demo.move(model, p.state, p.turns_remaining, p.turn - 1))
    traces = run_episodes(env_tasks("fault-chain-compact", range(n), {}), policy, budget)
    recovered = sum(t.success and any(" x" in p.observation for p in t.points) for t in traces)
    assert abs(recovered / n - exact) < 4 * math.sqrt(exact * (1 - exact) / n), (recovered, exact)
    got = [round(x * 100, 1) for x in repair_headroom(model, e, [4, 8, 11, 15])]
    assert got == [1.0, 6.3, 19.3, 40.0]
