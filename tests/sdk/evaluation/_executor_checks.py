"""The checks every executor passes (tests/sdk/evaluation/test_eval_executors*.py): the
thread executor's records, exactly once per (task, budget, sample) cell, and a resume after
a crash that plays each missing cell once."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from _eval_doubles import RandomWalker, line_tasks
from budgetmix.evaluation import EpisodeRecord, EvalConfig, Evaluator, read_results
from budgetmix.evaluation.executors import UnitExecutor
from budgetmix.evaluation.runner import derive_seed

CFG = EvalConfig(budgets=(2, 4, 7), samples=3, concurrency=4)
CRASH_SEED = derive_seed(0, "line-1", 2, "agent")  # the agent of task line-1, sample 2


class CrashOnOneCell(RandomWalker):
    """A RandomWalker that crashes on one (task, sample), in whichever process plays it."""

    def start(self, env: object, seed: int) -> None:
        if seed == CRASH_SEED:
            raise RuntimeError("agent crashed")
        super().start(env, seed)


def outcomes(records: Any) -> list[EpisodeRecord]:
    return sorted((replace(r, latency_s=0.0) for r in records), key=lambda r: r.key)


def episode_keys(path: Path) -> Counter[tuple[str, int, int]]:
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    return Counter(
        (x["task_id"], x["budget"], x["sample"]) for x in lines if x["type"] == "episode"
    )


def reference_records(path: Path, aware: bool) -> list[EpisodeRecord]:
    """What the thread executor (``Evaluator.run``'s default) gives."""
    run = Evaluator(lambda: RandomWalker(sees_budget=aware), line_tasks(3), CFG).run(path)
    return outcomes(run.records)


def check_records_once_per_cell(
    tmp_path: Path, executor: UnitExecutor, aware: bool, want: list[EpisodeRecord]
) -> None:
    path = tmp_path / "r.jsonl"
    run = Evaluator(lambda: RandomWalker(sees_budget=aware), line_tasks(3), CFG).run(
        path, executor=executor
    )
    assert outcomes(run.records) == want
    assert set(episode_keys(path).values()) == {1} and len(episode_keys(path)) == len(want)
    again = Evaluator(lambda: RandomWalker(sees_budget=aware), line_tasks(3), CFG).run(
        path, executor=executor
    )
    assert again.live_episodes == 0 and again.skipped == len(want)


def check_resume_after_a_crash(
    tmp_path: Path, executor: UnitExecutor, aware: bool, want: list[EpisodeRecord]
) -> None:
    path = tmp_path / "r.jsonl"
    crashing = Evaluator(lambda: CrashOnOneCell(sees_budget=aware), line_tasks(3), CFG)
    with pytest.raises(RuntimeError, match="agent crashed"):
        crashing.run(path, executor=executor)
    partial = read_results(path).records
    assert len(partial) < len(want)
    assert all(r.key[0] != "line-1" or r.key[2] != 2 for r in partial)  # never the crashed cell
    ref = {r.key: r for r in want}
    assert all(replace(r, latency_s=0.0) == ref[r.key] for r in partial)
    resumed = Evaluator(lambda: RandomWalker(sees_budget=aware), line_tasks(3), CFG).run(
        path, executor=executor
    )
    assert resumed.skipped == len(partial)
    assert outcomes(resumed.records) == want
    keys = episode_keys(path)
    assert set(keys.values()) == {1} and len(keys) == len(want)
