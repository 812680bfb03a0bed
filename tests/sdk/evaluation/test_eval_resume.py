"""Results stream to JSONL; a killed run resumes without loss; a finished grid reruns for free."""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import replace
from pathlib import Path

import pytest
from _eval_doubles import Crasher, RandomWalker, line_tasks
from budgetmix.evaluation import EpisodeRecord, EvalConfig, Evaluator, read_results
from budgetmix.exceptions import ConfigError

CFG = EvalConfig(budgets=(2, 4, 7), samples=4, concurrency=4)


def outcomes(records: tuple[EpisodeRecord, ...] | list[EpisodeRecord]) -> list[EpisodeRecord]:
    return sorted((replace(r, latency_s=0.0) for r in records), key=lambda r: r.key)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> list[EpisodeRecord]:
    path = tmp_path_factory.mktemp("ref") / "ref.jsonl"
    run = Evaluator(lambda: RandomWalker(sees_budget=True), line_tasks(3), CFG).run(path)
    assert len(run.records) == 3 * 3 * 4
    return outcomes(run.records)


def test_resume_after_agent_crash(tmp_path: Path, reference: list[EpisodeRecord]) -> None:
    path = tmp_path / "r.jsonl"
    counter, lock = [0], threading.Lock()
    crashing = Evaluator(lambda: Crasher(counter, 10, lock), line_tasks(3), CFG)
    with pytest.raises(RuntimeError, match="agent crashed"):
        crashing.run(path)
    partial = read_results(path).records
    assert 0 < len(partial) <= 10
    # what was written before the crash is exactly what an uninterrupted run produced
    ref = {r.key: r for r in reference}
    assert all(replace(r, latency_s=0.0) == ref[r.key] for r in partial)
    resumed = Evaluator(lambda: RandomWalker(sees_budget=True), line_tasks(3), CFG).run(path)
    assert resumed.skipped == len(partial)
    assert resumed.live_episodes == len(reference) - len(partial)
    assert outcomes(resumed.records) == reference
    assert outcomes(read_results(path).records) == reference


def test_resume_after_cancellation(tmp_path: Path, reference: list[EpisodeRecord]) -> None:
    path = tmp_path / "r.jsonl"
    ev = Evaluator(lambda: RandomWalker(sees_budget=True), line_tasks(3), CFG)

    async def cancel_after(n: int) -> None:
        seen: list[EpisodeRecord] = []
        task: asyncio.Task[object] | None = None

        def on_record(r: EpisodeRecord) -> None:
            seen.append(r)
            if len(seen) == n and task is not None:
                task.cancel()

        task = asyncio.create_task(ev.arun(path, on_record=on_record))
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_after(7))
    assert len(read_results(path).records) >= 7
    resumed = ev.run(path)
    assert outcomes(resumed.records) == reference


def test_rerun_of_finished_grid_does_no_work(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    made: list[RandomWalker] = []

    def factory() -> RandomWalker:
        a = RandomWalker(sees_budget=True)
        made.append(a)
        return a

    first = Evaluator(factory, line_tasks(2), CFG).run(path)
    size = path.stat().st_size
    made.clear()
    again = Evaluator(factory, line_tasks(2), CFG).run(path)
    assert again.live_episodes == 0 and again.env_steps == 0
    assert again.skipped == len(first.records) == len(again.records)
    assert all(not a.seen for a in made)  # no agent was asked for an action
    lines = path.read_text().splitlines()
    assert path.stat().st_size > size and json.loads(lines[-1])["type"] == "run"
    assert sum(json.loads(x)["type"] == "episode" for x in lines) == len(first.records)


def test_grid_growth_runs_only_new_cells(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    Evaluator(lambda: RandomWalker(), line_tasks(2), CFG).run(path)
    bigger = replace(CFG, budgets=(*CFG.budgets, 12), samples=5)
    run = Evaluator(lambda: RandomWalker(), line_tasks(2), bigger).run(path)
    # budget-blind: one live run per (task, sample) with missing budgets
    assert run.live_episodes == 2 * 4 + 2 * 1
    assert len(run.records) == 2 * 4 * 5


def test_truncated_last_line_is_skipped_and_repaired(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    Evaluator(lambda: RandomWalker(), line_tasks(1), CFG).run(path)
    lines = path.read_text().splitlines(keepends=True)
    # drop the last episode and leave half of its line, as a crash during write would
    cut = [x for x in lines if '"episode"' in x][-1]
    path.write_text("".join(x for x in lines if x is not cut) + cut[: len(cut) // 2])
    assert len(read_results(path).records) == len(CFG.budgets) * 4 - 1
    run = Evaluator(lambda: RandomWalker(), line_tasks(1), CFG).run(path)
    assert run.live_episodes == 1
    assert len(read_results(path).records) == len(CFG.budgets) * 4


def test_other_identity_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    Evaluator(lambda: RandomWalker(), line_tasks(1), CFG).run(path)
    other = replace(CFG, seed=1)
    with pytest.raises(ConfigError, match="fingerprint"):
        Evaluator(lambda: RandomWalker(), line_tasks(1), other).run(path)
    run = Evaluator(lambda: RandomWalker(), line_tasks(1), other).run(path, overwrite=True)
    assert run.skipped == 0
