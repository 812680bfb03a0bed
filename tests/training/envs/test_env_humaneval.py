"""HumanEval env: submission parsing, feedback, labels, oracles."""

from __future__ import annotations

import pytest
from budgetmix.environment import EnvStateError
from budgetmix.exceptions import ConfigError
from budgetmix.training.envs import (
    HumanEvalEnv,
    HumanEvalOracle,
    SandboxLimits,
    load_problems,
    play,
)
from budgetmix.training.envs.humaneval import build_program, extract_code

LIMITS = SandboxLimits(cpu_seconds=2, wall_seconds=4.0)
TOY = {
    "toy/0": {
        "task_id": "toy/0",
        "prompt": 'def add(a: int, b: int) -> int:\n    """Add."""\n',
        "canonical_solution": "    return a + b\n",
        "test": "def check(candidate):\n"
        "    assert candidate(0, 0) == 0\n"
        "    assert candidate(1, 2) == 3\n"
        "    assert candidate(-1, 5) == 4\n",
        "entry_point": "add",
    }
}


def toy_env() -> HumanEvalEnv:
    return HumanEvalEnv(problems=TOY, limits=LIMITS)


def test_extract_code() -> None:
    text = "First:\n```python\nx = 1\n```\nBetter:\n```py\ndef f():\n    return 2\n```\n"
    assert extract_code(text) == "def f():\n    return 2\n"
    assert extract_code("def f():\n    return 1") == "def f():\n    return 1\n"
    assert extract_code("  \n") == ""


def test_build_program_full_function_or_body() -> None:
    full, line = build_program(TOY["toy/0"], "def add(a, b):\n    return a + b\n")
    assert full.count("def add") == 2 and full.splitlines()[line - 1].startswith("def check")
    body, _ = build_program(TOY["toy/0"], "    return a + b\n")
    assert body.count("def add") == 1


def test_progress_follows_the_failing_assert() -> None:
    env = toy_env()
    obs = env.reset(0)
    assert "def add" in obs
    first = env.step("```python\ndef add(a, b):\n    return 1\n```")  # fails assert 1
    assert first.label.mistake == "env_action_failed" and first.label.progress
    assert "assert candidate(0, 0) == 0" in first.observation
    assert not first.done
    second = env.step("```python\ndef add(a, b):\n    return a * b\n```")  # fails assert 2
    assert second.label.progress and "candidate(1, 2)" in second.observation
    third = env.step("```python\ndef add(a, b):\n    return 1\n```")  # back to assert 1
    assert not third.label.progress
    done = env.step("```python\ndef add(a, b):\n    return a + b\n```")
    assert done.success and done.done and done.reward == 1.0 and done.label.progress
    with pytest.raises(EnvStateError):
        env.step("x")


def test_format_errors() -> None:
    env = toy_env()
    env.reset(0)
    empty = env.step("   ")
    assert not empty.label.valid and empty.label.mistake == "model_format_error"
    syntax = env.step("```python\ndef add(a, b:\n```")
    assert not syntax.label.valid and syntax.label.mistake == "model_format_error"
    assert "SyntaxError" in syntax.observation


def test_infinite_loop_feedback() -> None:
    env = HumanEvalEnv(problems=TOY, limits=SandboxLimits(cpu_seconds=1, wall_seconds=3.0))
    env.reset(0)
    result = env.step("```python\ndef add(a, b):\n    while True:\n        pass\n```")
    assert result.label.mistake == "env_action_failed"
    assert "did not finish in time" in result.observation


def test_feedback_is_truncated() -> None:
    env = HumanEvalEnv(problems=TOY, limits=LIMITS, feedback_chars=100)
    env.reset(0)
    result = env.step("```python\ndef add(a, b):\n    raise ValueError('x' * 5000)\n```")
    assert len(result.observation) < 400


def test_real_humaneval_problems_with_oracles() -> None:
    problems = load_problems()
    assert len(problems) == 164
    ids = ["HumanEval/0", "HumanEval/32", "HumanEval/162"]
    env = HumanEvalEnv(task_ids=ids, limits=LIMITS)
    for seed in range(3):
        steps = play(env, HumanEvalOracle(), seed=seed, max_turns=2)
        assert env.task_id == ids[seed]
        assert len(steps) == 1 and steps[0].success
    steps = play(env, HumanEvalOracle(broken_attempts=1), seed=0, max_turns=3)
    assert [s.success for s in steps] == [False, True]
    assert steps[0].label.mistake == "env_action_failed"


def test_bad_config() -> None:
    with pytest.raises(ConfigError, match="task_ids"):
        HumanEvalEnv(problems=TOY, task_ids=["nope"])
    with pytest.raises(ConfigError, match="problems"):
        HumanEvalEnv(problems={"x": {"prompt": ""}})


@pytest.mark.parametrize(
    "exit_early",
    ["raise SystemExit(0)", "import os\nos._exit(0)", "import sys\nsys.exit()"],
)
def test_exiting_before_the_tests_is_not_a_pass(exit_early: str) -> None:
    """A submission that ends the process cleanly before ``check`` runs scores nothing."""
    env = toy_env()
    env.reset(0)
    result = env.step(f"```python\ndef add(a, b):\n    return 0\n{exit_early}\n```")
    assert not result.success and not result.done and result.reward == 0.0
    assert result.label.mistake == "env_action_failed"
    assert "before the tests finished" in result.observation


def test_a_correct_solution_still_passes_with_the_completion_marker() -> None:
    env = toy_env()
    env.reset(0)
    assert env.step("```python\ndef add(a, b):\n    return a + b\n```").success
