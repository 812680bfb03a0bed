"""The thread executor and the process pool give the thread executor's records, exactly once
per (task, budget, sample) cell, and resume what an interrupted run left (the Ray executor
passes the same checks in test_eval_executors_ray.py, in a module of its own: a process
that forks while Ray runs in it can wedge Ray's client, so no fork happens beside it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _executor_checks import (
    check_records_once_per_cell,
    check_resume_after_a_crash,
    reference_records,
)
from budgetmix.evaluation import EpisodeRecord
from budgetmix.evaluation.executors import (
    ProcessExecutor,
    RayExecutor,
    ThreadExecutor,
    UnitExecutor,
    executor_named,
)
from budgetmix.exceptions import ConfigError


@pytest.fixture(params=["thread", pytest.param("process", marks=pytest.mark.slow)])
def executor(request: pytest.FixtureRequest) -> UnitExecutor:
    return executor_named(request.param, workers=2)


@pytest.fixture(scope="module", params=[True, False], ids=["aware", "blind"])
def reference(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[bool, list[EpisodeRecord]]:
    aware = bool(request.param)
    return aware, reference_records(tmp_path_factory.mktemp("ref") / "ref.jsonl", aware)


def test_an_executor_gives_the_thread_records_once_per_cell(
    tmp_path: Path, executor: UnitExecutor, reference: tuple[bool, list[EpisodeRecord]]
) -> None:
    check_records_once_per_cell(tmp_path, executor, *reference)


def test_an_executor_resumes_after_a_crash_exactly_once(
    tmp_path: Path, executor: UnitExecutor, reference: tuple[bool, list[EpisodeRecord]]
) -> None:
    check_resume_after_a_crash(tmp_path, executor, *reference)


def test_executors_refuse_bad_settings_naming_them() -> None:
    with pytest.raises(ConfigError, match="workers"):
        ProcessExecutor(0)
    with pytest.raises(ConfigError, match="workers"):
        RayExecutor(0)
    for bad in (0, -1.0, float("inf"), float("nan"), True):
        with pytest.raises(ConfigError, match="start_timeout_s"):
            RayExecutor(2, start_timeout_s=bad)
    with pytest.raises(ConfigError, match="executor must be one of thread, process, ray"):
        executor_named("dask")
    assert isinstance(executor_named("thread"), ThreadExecutor)
