"""Every executor (threads, a process pool, Ray) gives the thread executor's records, exactly
once per (task, budget, sample) cell, and resumes what an interrupted run left."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from _eval_doubles import RandomWalker, line_tasks
from budgetmix.evaluation import EpisodeRecord, EvalConfig, Evaluator, read_results
from budgetmix.evaluation.executors import (
    ProcessExecutor,
    RayExecutor,
    ThreadExecutor,
    UnitExecutor,
    executor_named,
)
from budgetmix.evaluation.runner import derive_seed
from budgetmix.exceptions import ConfigError

CFG = EvalConfig(budgets=(2, 4, 7), samples=3, concurrency=4)
CRASH_SEED = derive_seed(0, "line-1", 2, "agent")  # the agent of task line-1, sample 2

_NO_RAY = importlib.util.find_spec("ray") is None
_PROBE_S = 180
_PROBE = (
    "import ray; ray.init(num_cpus=1, _node_ip_address='127.0.0.1', include_dashboard=False,"
    " log_to_driver=False); assert ray.get(ray.remote(lambda: 7).remote()) == 7; ray.shutdown()"
)


def _why_ray_cannot_run_here() -> str | None:
    """None if a local Ray cluster starts and runs a task on this machine, in a child process
    (its own session, killed whole past the deadline); else the reason, for the skip."""
    child = subprocess.Popen(
        [sys.executable, "-c", _PROBE],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _, err = child.communicate(timeout=_PROBE_S)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        return f"a local Ray cluster did not start and run one task within {_PROBE_S} s here"
    if child.returncode != 0:
        tail = " | ".join(err.strip().splitlines()[-3:])
        return f"a local Ray cluster does not start here (exit {child.returncode}): {tail}"
    return None


class CrashOnOneCell(RandomWalker):
    """A RandomWalker that crashes on one (task, sample), in whichever process plays it."""

    def start(self, env: object, seed: int) -> None:
        if seed == CRASH_SEED:
            raise RuntimeError("agent crashed")
        super().start(env, seed)


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    if _NO_RAY:
        pytest.skip("ray is not installed (pip install 'budgetmix[ray]')")
    why = _why_ray_cannot_run_here()
    if why is not None:
        pytest.skip(why)
    import ray

    here = str(Path(__file__).parent)  # the workers import the doubles by module name
    path = os.pathsep.join([here, os.environ.get("PYTHONPATH", "")])
    ray.init(
        num_cpus=2,
        _node_ip_address="127.0.0.1",  # loopback only
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": path}},
    )
    yield
    ray.shutdown()


@pytest.fixture(params=["thread", "process", "ray"])
def executor(request: pytest.FixtureRequest) -> UnitExecutor:
    if request.param == "ray":
        request.getfixturevalue("ray_cluster")
    return executor_named(request.param, workers=2)


def outcomes(records: Any) -> list[EpisodeRecord]:
    return sorted((replace(r, latency_s=0.0) for r in records), key=lambda r: r.key)


def episode_keys(path: Path) -> Counter[tuple[str, int, int]]:
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    return Counter(
        (x["task_id"], x["budget"], x["sample"]) for x in lines if x["type"] == "episode"
    )


@pytest.fixture(scope="module", params=[True, False], ids=["aware", "blind"])
def reference(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[bool, list[EpisodeRecord]]:
    aware = bool(request.param)
    path = tmp_path_factory.mktemp("ref") / "ref.jsonl"
    run = Evaluator(lambda: RandomWalker(sees_budget=aware), line_tasks(3), CFG).run(path)
    return aware, outcomes(run.records)


def test_an_executor_gives_the_thread_records_once_per_cell(
    tmp_path: Path, executor: UnitExecutor, reference: tuple[bool, list[EpisodeRecord]]
) -> None:
    aware, want = reference
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


def test_an_executor_resumes_after_a_crash_exactly_once(
    tmp_path: Path, executor: UnitExecutor, reference: tuple[bool, list[EpisodeRecord]]
) -> None:
    aware, want = reference
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


def test_ray_fails_a_run_whose_actors_cannot_start_instead_of_waiting(
    tmp_path: Path, ray_cluster: None
) -> None:
    # The module's cluster has 2 CPUs: a third actor is never placed, and would wait for ever.
    evaluator = Evaluator(lambda: RandomWalker(sees_budget=True), line_tasks(3), CFG)
    with pytest.raises(TimeoutError, match=r"did not start 3 evaluation actor\(s\).*within 5 s"):
        evaluator.run(tmp_path / "r.jsonl", executor=RayExecutor(3, start_timeout_s=5))
    assert read_results(tmp_path / "r.jsonl").records == ()


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
