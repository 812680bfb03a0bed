"""faulty-tools-compact: labels, the exact model against closed forms and brute force, the flip."""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Sequence

import pytest
from budgetmix.environment import EnvStateError, Task
from budgetmix.training.diagnostics.budget_sensitivity import budget_sensitivity
from budgetmix.training.diagnostics.episodes import DecisionPoint, pointwise, run_episodes
from budgetmix.training.envs import env_spec, env_tasks, make_env
from budgetmix.training.envs.faulty_tools_compact import CompactFaultyTools
from budgetmix.training.envs.faulty_tools_oracle import (
    TOOL_MOVES,
    ToolsDemonstrator,
    ToolsModel,
    aware_success_curve,
    find_ceiling,
    finite_horizon_values,
    guess_budgets,
    optimal_move,
    parse_tool_move,
    policy_success_curve,
    stationary_policy,
    tools_q,
)

MODEL = ToolsModel(3, 0.3, 0.25)
KW = {"hops": 3, "fault_p": 0.3, "guess_p": 0.25}


class _Fixed:
    """A stand-in generator whose every draw is ``x`` (forces one outcome)."""

    def __init__(self, x: float) -> None:
        self.x = x

    def random(self) -> float:
        return self.x


FAULT, OK = _Fixed(0.0), _Fixed(1.0 - 1e-12)


def _env(seed: int = 0) -> CompactFaultyTools:
    env = CompactFaultyTools(**KW)
    env.reset(seed)
    return env


# -- labels -----------------------------------------------------------------------------
def test_a_fault_is_a_tool_error_and_a_retry_makes_progress() -> None:
    env = _env()
    env._faults = FAULT  # type: ignore[assignment]
    r = env.step("n")
    assert r.label.mistake == "tool_error" and r.label.valid and not r.label.progress
    assert env.state == (0, True) and r.observation == "A A A A A A !" and not r.done
    env._faults = OK  # type: ignore[assignment]
    r = env.step("n")  # the retry
    assert r.label.progress and r.label.mistake is None and env.state == (1, False)
    assert r.observation == "B B B B B B"


def test_answer_before_the_chain_is_complete_ends_the_episode_as_a_failure() -> None:
    env = _env()
    env._faults = OK  # type: ignore[assignment]
    env.step("n")
    r = env.step("a")
    assert r.done and not r.success and r.reward == 0.0
    assert r.label.mistake is None and "incomplete" in r.label.detail
    with pytest.raises(EnvStateError):
        env.step("n")


def test_answer_after_the_whole_chain_succeeds_and_a_lookup_past_it_is_refused() -> None:
    env = _env()
    env._faults = OK  # type: ignore[assignment]
    for _ in range(3):
        assert env.step("n").label.progress
    r = env.step("n")  # no next key
    assert r.label.mistake == "invalid_tool_arguments" and r.label.valid and not r.done
    assert env.state == (3, False) and r.observation.endswith("?")
    r = env.step("a")
    assert r.done and r.success and r.reward == 1.0 and r.label.progress


@pytest.mark.parametrize(("draw", "right"), [(0.0, True), (0.9, False)])
def test_a_guess_ends_the_episode_right_with_guess_p(draw: float, right: bool) -> None:
    env = _env()
    env._faults, env._guesses = OK, _Fixed(draw)  # type: ignore[assignment]
    r = env.step("g")
    assert r.done and r.success is right and r.label.progress is right
    assert r.label.detail == ("guess right" if right else "guess wrong")


def test_a_faulted_guess_or_answer_can_be_retried() -> None:
    env = _env()
    env._faults = FAULT  # type: ignore[assignment]
    for move in "ga":
        r = env.step(move)
        assert r.label.mistake == "tool_error" and not r.done and env.state == (0, True)


def test_an_unparseable_reply_is_a_format_error_and_draws_no_fault() -> None:
    env = _env(5)
    before = env._faults.getstate()  # type: ignore[attr-defined]
    r = env.step("hello")
    assert r.label.mistake == "model_format_error" and not r.label.valid and not r.done
    assert r.observation == "A A A A A A ?" and env._faults.getstate() == before  # type: ignore[attr-defined]


def test_faults_are_seeded_by_reset_one_draw_per_tool_call() -> None:
    def play(seed: int) -> list[str | None]:
        env = _env(seed)
        return [env.step("n").label.mistake for _ in range(2)]

    assert play(11) == play(11)
    rng = random.Random("faults:11")
    expected = [("tool_error" if rng.random() < 0.3 else None) for _ in range(2)]
    assert play(11) == expected
    outcomes = {tuple(play(s)) for s in range(40)}
    assert len(outcomes) > 1


def test_parse_and_registry() -> None:
    assert [parse_tool_move(t) for t in ("n", " A ", "g", "guess", "x", "nn")] == [
        0, 1, 2, 2, None, None,
    ]  # fmt: skip
    env = make_env("faulty-tools-compact", demo_budget_aware=True, demo_gamma=0.9, **KW)
    assert isinstance(env, CompactFaultyTools) and env.hops == 3
    (task,) = env_tasks("faulty-tools-compact", [7], KW)
    assert task.task_id == "faulty-tools-compact-7"


# -- the exact model --------------------------------------------------------------------
def _binomial_tail(n: int, p: float, at_least: int) -> float:
    return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(at_least, n + 1))


def test_the_blind_policy_looks_up_then_answers_and_matches_the_binomial_closed_form() -> None:
    blind = stationary_policy(MODEL, 0.99)
    assert [TOOL_MOVES[a] for a in blind] == ["n", "n", "n", "a"]
    curve = policy_success_curve(MODEL, blind, 20)
    for t in range(21):  # success iff hops + 1 of the first t calls go through
        assert curve[t] == pytest.approx(_binomial_tail(t, 0.7, 4), abs=1e-12)


def test_the_aware_optimum_with_too_few_turns_retries_a_guess() -> None:
    curve = aware_success_curve(MODEL, 3)
    for t in range(4):  # no chain fits: guess, and retry the guess after a fault
        assert curve[t] == pytest.approx((1 - 0.3**t) * 0.25, abs=1e-12)


def _brute_force(env: CompactFaultyTools, k: int) -> float:
    """Expectimax over the real environment's steps: every move, every outcome."""
    if k == 0:
        return 0.0
    model = env.model
    best = 0.0
    for move in TOOL_MOVES:
        value = 0.0
        for fault, p_fault in ((True, model.fault_p), (False, 1 - model.fault_p)):
            guesses = (
                ((True, model.guess_p), (False, 1 - model.guess_p))
                if move == "g"
                else ((False, 1.0),)
            )
            for right, p_guess in guesses:
                if p_fault * p_guess == 0:
                    continue
                e = copy.deepcopy(env)
                e._faults = FAULT if fault else OK  # type: ignore[assignment]
                e._guesses = _Fixed(0.0) if right else OK  # type: ignore[assignment]
                r = e.step(move)
                later = float(r.success) if r.done else _brute_force(e, k - 1)
                value += p_fault * p_guess * later
        best = max(best, value)
    return best


@pytest.mark.parametrize(("hops", "fault_p", "guess_p"), [(2, 0.3, 0.25), (3, 0.4, 0.5)])
def test_value_iteration_matches_brute_force_over_the_real_environment(
    hops: int, fault_p: float, guess_p: float
) -> None:
    model = ToolsModel(hops, fault_p, guess_p)
    v, _ = finite_horizon_values(model, 5)
    for k in range(6):
        env = CompactFaultyTools(hops, fault_p, guess_p)
        env.reset(0)
        assert _brute_force(env, k) == pytest.approx(v[k][0], abs=1e-12)


def test_the_optimum_guesses_exactly_when_the_chain_and_answer_cannot_fit() -> None:
    _, q = finite_horizon_values(MODEL, 30)
    for k in range(1, 31):
        for j in range(4):
            row = q[k][j]
            best = optimal_move(row)
            want = "a" if j == 3 else ("g" if k <= 3 - j else "n")
            assert TOOL_MOVES[best] == want, (k, j)
            if k <= 16:  # strictly (later the values all approach 1)
                assert sorted(row)[-1] - sorted(row)[-2] > 1e-9
    assert guess_budgets(MODEL, 30) == (1, 2, 3)
    assert find_ceiling(MODEL) == 8


def test_the_known_aware_and_blind_success_at_fractions_of_the_ceiling() -> None:
    aware = aware_success_curve(MODEL, 12)
    blind = policy_success_curve(MODEL, stationary_policy(MODEL), 12)
    got = [(round(aware[t], 4), round(blind[t], 4)) for t in (2, 4, 6, 8, 12)]
    assert got == [
        (0.2275, 0.0), (0.3866, 0.2401), (0.7777, 0.7443), (0.9477, 0.942), (0.9984, 0.9983),
    ]  # fmt: skip
    assert all(a >= b for a, b in zip(aware, blind, strict=True))


def test_the_defaults_flip_at_the_nine_ten_boundary_with_ceiling_fifteen() -> None:
    model = ToolsModel()  # the experiment presets' environment
    assert (model.hops, model.fault_p, model.guess_p) == (9, 0.2, 0.25)
    _, q = finite_horizon_values(model, 16)
    for k in range(1, 17):
        for j in range(10):
            want = "a" if j == 9 else ("g" if k <= 9 - j else "n")
            assert TOOL_MOVES[optimal_move(q[k][j])] == want, (k, j)
    assert guess_budgets(model, 40) == tuple(range(1, 10)) and find_ceiling(model) == 15
    aware = aware_success_curve(model, 22)
    blind = policy_success_curve(model, stationary_policy(model), 22)
    got = [(round(aware[t], 4), round(blind[t], 4)) for t in (4, 8, 11, 15, 22)]
    assert got == [
        (0.2496, 0.0), (0.25, 0.0), (0.4743, 0.3221), (0.9491, 0.9389), (0.9999, 0.9999),
    ]  # fmt: skip


def test_the_oracle_on_the_real_environment_scores_its_exact_value() -> None:
    demo = ToolsDemonstrator(0.0, 0)
    policy = pointwise(lambda p: demo.move(MODEL, p.state[0], p.turns_remaining))
    tasks = env_tasks("faulty-tools-compact", range(3000), KW)
    traces = run_episodes(tasks, policy, 4)
    rate = sum(t.success for t in traces) / len(traces)
    exact = aware_success_curve(MODEL, 4)[4]
    assert abs(rate - exact) < 4 * math.sqrt(exact * (1 - exact) / len(traces))


# -- demonstrator, Q-function, sensitivity -----------------------------------------------
def test_the_demonstrator_errs_at_its_rate_with_another_move() -> None:
    demo = ToolsDemonstrator(0.3, 1)
    moves = [demo.move(MODEL, 0, 8) for _ in range(4000)]
    assert abs(moves.count("n") / 4000 - 0.7) < 0.03
    assert abs(moves.count("a") - moves.count("g")) < 200
    blind = ToolsDemonstrator(0.0, 1, budget_blind=True)
    assert {blind.move(MODEL, 0, k) for k in range(1, 12)} == {"n"}
    agent = env_spec("faulty-tools-compact").make_demo_agent(
        {**KW, "demo_budget_aware": True}, 0.0, 3
    )

    class _Request:
        env = _env()
        state = type("S", (), {"turns_remaining": 2})()

    assert agent(_Request()) == "g"  # type: ignore[arg-type]


def _point(links: int, turns_left: int) -> DecisionPoint:
    return DecisionPoint("t", 0, 1, turns_left, turns_left, (links, False), "", ())


def test_the_q_function_reads_the_state_and_prices_an_invalid_reply_as_a_spent_turn() -> None:
    q = tools_q(MODEL)
    v, table = finite_horizon_values(MODEL, 64)
    assert q(_point(2, 5), "n") == table[5][2][0] and q(_point(3, 2), "a") == table[2][3][1]
    assert q(_point(1, 4), "???") == v[3][1]
    assert q(_point(0, 1), "g") == pytest.approx(0.7 * 0.25)


def _tasks(n: int) -> list[Task]:
    return env_tasks("faulty-tools-compact", range(n), KW)


def _sensitivity(policy: object, n: int) -> object:
    return budget_sensitivity(
        _tasks(n), policy, list(range(1, 13)), tools_q(MODEL), parse_tool_move,  # type: ignore[arg-type]
        moves=tuple(TOOL_MOVES),
    )  # fmt: skip


def test_the_oracle_flips_at_the_computed_turns_left_and_scores_one() -> None:
    demo = ToolsDemonstrator(0.0, 0)
    res = _sensitivity(pointwise(lambda p: demo.move(MODEL, 0, p.turns_remaining)), 10)
    assert res.flip_action == "g"  # type: ignore[attr-defined]
    assert res.optimal_budgets == (1, 2, 3)  # type: ignore[attr-defined]
    assert res.other_budgets == tuple(range(4, 13))  # type: ignore[attr-defined]
    assert res.sensitivity == 1.0 and res.share_optimal == 1.0  # type: ignore[attr-defined]
    assert not any(c.tied for c in res.cells)  # type: ignore[attr-defined]


def test_a_budget_blind_policy_scores_zero_sensitivity() -> None:
    blind = ToolsDemonstrator(0.0, 0, budget_blind=True)
    res = _sensitivity(pointwise(lambda p: blind.move(MODEL, 0, p.turns_remaining)), 10)
    assert res.sensitivity == 0.0 and res.noise_floor == 0.0  # type: ignore[attr-defined]
    rng = random.Random(3)

    def noisy(points: Sequence[DecisionPoint]) -> list[str]:  # turns left never read
        return [rng.choice("nnngga") for _ in points]

    res = _sensitivity(noisy, 300)
    assert res.noise_floor > 0.02  # type: ignore[attr-defined]
    assert abs(res.sensitivity) <= res.noise_floor  # type: ignore[attr-defined]
    assert res.low <= 0.0 <= res.high  # type: ignore[attr-defined]
