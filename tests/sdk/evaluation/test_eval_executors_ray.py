"""The Ray executor passes the thread executor's checks (exactly once per cell, resume after
a crash) on a local Ray instance with 2 CPUs, and fails a run whose actors cannot start
instead of waiting for ever.

Ray runs only in this module, and nothing here forks while it runs: a process that forks
beside a live Ray client can leave the client's next call to its cluster waiting for ever.
Before Ray starts in this process, a child process checks that a local cluster starts and
runs a task on this machine; where it cannot, the module skips with that reason."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from _eval_doubles import RandomWalker, line_tasks
from _executor_checks import (
    CFG,
    check_records_once_per_cell,
    check_resume_after_a_crash,
    reference_records,
)
from budgetmix.evaluation import EpisodeRecord, Evaluator, read_results
from budgetmix.evaluation.executors import RayExecutor

pytestmark = pytest.mark.slow  # a local Ray cluster, end to end (minutes)

_PROBE_S = 180
_PROBE = (
    "import ray; ray.init(num_cpus=1, _node_ip_address='127.0.0.1', include_dashboard=False,"
    " log_to_driver=False); assert ray.get(ray.remote(lambda: 7).remote()) == 7; ray.shutdown()"
)


def _why_ray_cannot_run_here() -> str | None:
    """None if a local Ray cluster starts and runs a task on this machine, in a child process
    (its own session, killed whole past the deadline); else the reason, for the skip."""
    if importlib.util.find_spec("ray") is None:
        return "ray is not installed (pip install 'budgetmix[ray]')"
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


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
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


@pytest.fixture(scope="module", params=[True, False], ids=["aware", "blind"])
def reference(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[bool, list[EpisodeRecord]]:
    aware = bool(request.param)
    return aware, reference_records(tmp_path_factory.mktemp("ref") / "ref.jsonl", aware)


@pytest.mark.usefixtures("ray_cluster")
def test_ray_gives_the_thread_records_once_per_cell(
    tmp_path: Path, reference: tuple[bool, list[EpisodeRecord]]
) -> None:
    check_records_once_per_cell(tmp_path, RayExecutor(2), *reference)


@pytest.mark.usefixtures("ray_cluster")
def test_ray_resumes_after_a_crash_exactly_once(
    tmp_path: Path, reference: tuple[bool, list[EpisodeRecord]]
) -> None:
    check_resume_after_a_crash(tmp_path, RayExecutor(2), *reference)


@pytest.mark.usefixtures("ray_cluster")
def test_ray_fails_a_run_whose_actors_cannot_start_instead_of_waiting(tmp_path: Path) -> None:
    # The module's cluster has 2 CPUs: a third actor is never placed, and would wait for ever.
    evaluator = Evaluator(lambda: RandomWalker(sees_budget=True), line_tasks(3), CFG)
    with pytest.raises(TimeoutError, match=r"did not start 3 evaluation actor\(s\).*within 5 s"):
        evaluator.run(tmp_path / "r.jsonl", executor=RayExecutor(3, start_timeout_s=5))
    assert read_results(tmp_path / "r.jsonl").records == ()
