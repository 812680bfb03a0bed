"""The evaluator reads the same policy config as the demo and training."""

from __future__ import annotations

from pathlib import Path

import pytest
from _eval_doubles import line_tasks
from budgetmix.evaluation import EvalConfig, Evaluator
from budgetmix.exceptions import ConfigError


class StubbornAgent:
    """Budget-blind; keeps calling a failing tool."""

    sees_budget = False

    def start(self, env: object, seed: int) -> None:
        pass

    def act(self, observation: str, notice: str | None, turns_remaining: int | None) -> str:
        return "x"


def test_early_stop_policy_ends_episodes_and_is_categorised(tmp_path: Path) -> None:
    policy = {"early_stop": {"kind": "repeated_mistakes", "n": 3}}
    cfg = EvalConfig(budgets=(10,), samples=2, policy=policy)
    run = Evaluator(StubbornAgent, line_tasks(2), cfg).run(tmp_path / "r.jsonl")
    assert {r.failure for r in run.records} == {"early_stop"}
    assert {r.turns_used for r in run.records} == {3}


def test_prefix_sharing_with_early_stop_equals_separate_runs(tmp_path: Path) -> None:
    policy = {"early_stop": {"kind": "repeated_mistakes", "n": 3}}
    shared = Evaluator(StubbornAgent, line_tasks(2), EvalConfig(budgets=(2, 5), policy=policy))
    separate = Evaluator(
        StubbornAgent,
        line_tasks(2),
        EvalConfig(budgets=(2, 5), policy=policy, prefix_sharing=False),
    )
    a = shared.run(tmp_path / "a.jsonl")
    b = separate.run(tmp_path / "b.jsonl")
    assert a.derived_records > 0
    key = lambda r: r.key  # noqa: E731
    assert [(r.key, r.failure, r.turns_used) for r in sorted(a.records, key=key)] == [
        (r.key, r.failure, r.turns_used) for r in sorted(b.records, key=key)
    ]


def test_extension_policy_turns_prefix_sharing_off(tmp_path: Path) -> None:
    policy = {"extension": {"kind": "progress", "turns": 2}}
    run = Evaluator(StubbornAgent, line_tasks(1), EvalConfig(budgets=(2, 4), policy=policy)).run(
        tmp_path / "r.jsonl"
    )
    assert run.derived_records == 0 and run.live_episodes == 2


def test_bad_policy_config_fails_at_construction() -> None:
    with pytest.raises(ConfigError, match="early_stop"):
        EvalConfig(budgets=(2,), policy={"early_stop": {"kind": "nope"}})
