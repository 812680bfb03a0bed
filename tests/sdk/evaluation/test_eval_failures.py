"""The failure breakdown: every category from a real episode, and the mapping table."""

from __future__ import annotations

from pathlib import Path

import pytest
from _eval_doubles import PROVIDER_DOWN, LineEnv, Script
from budgetmix.environment import Task
from budgetmix.evaluation import FAILURE_CATEGORIES, EvalConfig, Evaluator, classify_failure


def play(tmp_path: Path, agent: Script, *, ends_on: tuple[str, ...] = (), **cfg: object) -> str:
    tasks = [Task(task_id="t", make_env=lambda: LineEnv(goal=2, ends_on=ends_on), seed=0)]
    config = EvalConfig(budgets=(3,), **cfg)  # type: ignore[arg-type]
    (rec,) = Evaluator(lambda: agent, tasks, config).run(tmp_path / "r.jsonl").records
    return rec.failure


@pytest.mark.parametrize(
    ("actions", "ends_on", "expected"),
    [
        (["+"], (), "success"),
        (["-"], (), "budget_exhausted"),
        (["?"], (), "budget_exhausted"),  # exhaustion wins over the mistakes before it
        (["x"], ("x",), "tool_error"),
        (["bad-args"], ("bad-args",), "invalid_arguments"),
        (["?"], ("?",), "format_error"),
        (["stop"], (), "wrong_final_answer"),
        (["?", "stop"], (), "wrong_final_answer"),
    ],
)
def test_categories_from_episodes(
    tmp_path: Path, actions: list[str], ends_on: tuple[str, ...], expected: str
) -> None:
    assert play(tmp_path, Script(actions), ends_on=ends_on) == expected


def test_provider_error_is_an_outcome(tmp_path: Path) -> None:
    assert play(tmp_path, Script(["+"], raise_exc=PROVIDER_DOWN)) == "provider_error"


def test_agent_bug_raises_or_is_recorded(tmp_path: Path) -> None:
    with pytest.raises(ZeroDivisionError):
        play(tmp_path / "a", Script(["+"], raise_exc=ZeroDivisionError()))
    failure = play(tmp_path / "b", Script(["+"], raise_exc=ZeroDivisionError()), on_error="record")
    assert failure == "error"


@pytest.mark.parametrize(
    ("status", "kwargs", "expected"),
    [
        ("success", {"last_mistake": "tool_error"}, "success"),
        ("budget_exhausted", {"last_mistake": "tool_error"}, "budget_exhausted"),
        ("early_stopped", {}, "early_stop"),
        ("error", {}, "error"),
        ("failed", {"exception": "provider_error"}, "provider_error"),
        ("failed", {"last_mistake": "unknown_tool"}, "invalid_arguments"),
        ("failed", {"last_mistake": "provider_error"}, "provider_error"),
        ("failed", {"last_mistake": "env_action_failed"}, "wrong_final_answer"),
        ("failed", {"last_info": {"failure": "tool_error"}}, "tool_error"),
        ("failed", {"last_info": {"failure": "not-a-category"}}, "wrong_final_answer"),
    ],
)
def test_mapping_table(status: str, kwargs: dict[str, object], expected: str) -> None:
    assert classify_failure(status, **kwargs) == expected  # type: ignore[arg-type]
    assert expected in FAILURE_CATEGORIES


class BrokenEnv(LineEnv):
    def reset(self, seed: int) -> str:
        raise OSError("env could not start")


def test_env_failure_on_reset(tmp_path: Path) -> None:
    tasks = [Task(task_id="t", make_env=BrokenEnv, seed=0)]
    cfg = EvalConfig(budgets=(3,), on_error="record")
    (rec,) = Evaluator(lambda: Script(["+"]), tasks, cfg).run(tmp_path / "r.jsonl").records
    assert (rec.failure, rec.turns_used) == ("error", 0)
    assert rec.error is not None and "env could not start" in rec.error
    with pytest.raises(OSError):
        Evaluator(lambda: Script(["+"]), tasks, EvalConfig(budgets=(3,))).run(tmp_path / "b")
