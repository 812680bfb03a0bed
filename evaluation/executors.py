"""Where the evaluator's episodes run: threads (the default), a process pool, or Ray.

:meth:`~budgetmix.evaluation.runner.Evaluator.arun` plans the missing units
(one live episode per (task, sample), at its largest missing budget) and hands
them to an executor; the executor plays each unit with the same
``Evaluator._run_unit`` and gives its records back to the parent, which alone
writes the results file as units finish. So whichever executor ran them,
records are written exactly once per (task, budget, sample) cell, an
interrupted run resumes from the file, and a unit's records are those the
thread executor gives (the seeds derive from the cell, not from the worker).

* :class:`ThreadExecutor`: ``concurrency`` episodes in flight in one process
  (asyncio over a thread pool), for agents that wait on a server.
* :class:`ProcessExecutor`: ``workers`` processes, one episode each at a time,
  for CPU-bound agents and local models. The workers are forked (POSIX): the
  agent factory and tasks need not pickle; records and agent exceptions do.
* :class:`RayExecutor`: ``workers`` Ray actors (``pip install budgetmix[ray]``),
  each holding its own evaluator built from the agent factory, tasks and config
  (cloudpickled by Ray), on a running cluster (``address`` or ``RAY_ADDRESS``)
  or a local one started with ``workers`` CPUs.

The first failure of a unit (``on_error="raise"``) cancels the units not yet
started and is raised by ``arun``; what finished before it is in the file.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from budgetmix.exceptions import ConfigError

if TYPE_CHECKING:
    from budgetmix.evaluation.results import EpisodeRecord
    from budgetmix.evaluation.runner import Evaluator, _Tally, _Unit

__all__ = ["ProcessExecutor", "RayExecutor", "ThreadExecutor", "UnitExecutor", "executor_named"]

#: What one unit gives back: its records (sorted by budget) and its env steps.
UnitResult = tuple[list["EpisodeRecord"], int]


class UnitExecutor(Protocol):
    """Plays the planned units of an evaluator, handing each result to ``tally``."""

    async def run_units(self, evaluator: Evaluator, units: Sequence[_Unit], tally: _Tally) -> None:
        """Play every unit; raise the first failure after cancelling the rest."""


async def _drive(
    units: Sequence[_Unit],
    slots: int,
    play: Callable[[int, int], Awaitable[UnitResult]],
    tally: _Tally,
) -> None:
    """``slots`` loops, each playing the next unit (``play(slot, index)``) until none is left."""
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(len(units)):
        queue.put_nowait(i)

    async def loop(slot: int) -> None:
        while not queue.empty():
            records, steps = await play(slot, queue.get_nowait())
            tally.add(records, steps)

    tasks = [asyncio.create_task(loop(s)) for s in range(max(1, min(slots, len(units))))]
    try:
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


@dataclass(frozen=True, slots=True)
class ThreadExecutor:
    """The evaluator's own asyncio loop over a thread pool (``EvalConfig.concurrency``)."""

    async def run_units(self, evaluator: Evaluator, units: Sequence[_Unit], tally: _Tally) -> None:
        """Play ``units`` with ``concurrency`` episodes in flight."""
        workers = min(evaluator.config.concurrency, max(1, len(units)))

        async def play(_slot: int, index: int) -> UnitResult:
            return await evaluator._run_unit(units[index])

        await _drive(units, workers, play, tally)


# The forked workers' evaluator and plan (set in the parent just before the fork).
_FORKED: tuple[Evaluator, Sequence[_Unit]] | None = None


def _forked_init() -> None:
    assert _FORKED is not None
    _FORKED[0]._pool = ThreadPoolExecutor(max_workers=1)  # the parent's threads are not here


def _forked_play(index: int) -> UnitResult:
    assert _FORKED is not None
    evaluator, units = _FORKED
    return asyncio.run(evaluator._run_unit(units[index]))


@dataclass(frozen=True, slots=True)
class ProcessExecutor:
    """``workers`` forked processes, one episode each at a time (see the module docstring).

    Raises:
        ConfigError: ``workers`` below 1, or no ``fork`` on this platform.
    """

    workers: int = 2

    def __post_init__(self) -> None:
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1:
            raise ConfigError(f"workers must be an integer >= 1, got {self.workers!r}")
        if "fork" not in multiprocessing.get_all_start_methods():
            raise ConfigError("workers: the process pool forks its workers (POSIX only)")

    async def run_units(self, evaluator: Evaluator, units: Sequence[_Unit], tally: _Tally) -> None:
        """Play ``units`` in the pool; the parent writes what they give back."""
        global _FORKED
        if not units:
            return
        _FORKED = (evaluator, tuple(units))
        loop = asyncio.get_running_loop()
        pool = ProcessPoolExecutor(
            max_workers=min(self.workers, len(units)),
            mp_context=multiprocessing.get_context("fork"),
            initializer=_forked_init,
        )

        async def play(_slot: int, index: int) -> UnitResult:
            return await loop.run_in_executor(pool, _forked_play, index)

        try:
            await _drive(units, self.workers, play, tally)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            _FORKED = None


class _RayWorker:
    """A Ray actor's own evaluator (built once from what the parent's was built from)."""

    def __init__(self, agent_factory: Any, tasks: Sequence[Any], config: Any) -> None:
        from budgetmix.evaluation.runner import Evaluator

        self.evaluator = Evaluator(agent_factory, tasks, config)

    def play(self, unit: _Unit) -> UnitResult:
        return asyncio.run(self.evaluator._run_unit(unit))


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ConfigError("executor 'ray' needs Ray: pip install 'budgetmix[ray]'") from exc
    return ray


@dataclass(frozen=True, slots=True)
class RayExecutor:
    """``workers`` Ray actors (see the module docstring); ``address`` joins a running cluster,
    ``None`` starts a local one with ``workers`` CPUs unless Ray is initialised already.
    ``start_timeout_s`` bounds the wait for the actors to start: a cluster that cannot place
    them (too few CPUs, workers that die on import) fails the run, naming what it lacks,
    instead of leaving it pending for ever.

    Raises:
        ConfigError: ``workers`` below 1 or ``start_timeout_s`` not positive (and, when run,
            Ray not installed).
        TimeoutError: when run, the actors did not start within ``start_timeout_s``.
    """

    workers: int = 2
    address: str | None = None
    start_timeout_s: float = 300.0

    def __post_init__(self) -> None:
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1:
            raise ConfigError(f"workers must be an integer >= 1, got {self.workers!r}")
        t = self.start_timeout_s
        if isinstance(t, bool) or not isinstance(t, int | float) or not 0 < t < float("inf"):
            raise ConfigError(f"start_timeout_s must be a positive number, got {t!r}")

    async def run_units(self, evaluator: Evaluator, units: Sequence[_Unit], tally: _Tally) -> None:
        """Play ``units`` on the actors; the parent writes what they give back."""
        ray = _ray()
        if not units:
            return
        if not ray.is_initialized():
            address = self.address or os.environ.get("RAY_ADDRESS")
            # A local instance stays on loopback: Ray would otherwise bind and dial the
            # machine's own network address.
            extra: dict[str, Any] = (
                {} if address else {"num_cpus": self.workers, "_node_ip_address": "127.0.0.1"}
            )
            ray.init(address=address, include_dashboard=False, log_to_driver=False, **extra)
        actor = ray.remote(num_cpus=1)(_RayWorker)
        n = min(self.workers, len(units))
        actors = [
            actor.remote(evaluator.agent_factory, evaluator.tasks, evaluator.config)
            for _ in range(n)
        ]

        async def play(slot: int, index: int) -> UnitResult:
            result: UnitResult = await actors[slot].play.remote(units[index])
            return result

        try:
            await self._started(ray, actors)
            await _drive(units, n, play, tally)
        finally:
            for a in actors:
                ray.kill(a)

    async def _started(self, ray: Any, actors: Sequence[Any]) -> None:
        ready = asyncio.gather(*(a.__ray_ready__.remote() for a in actors))
        try:
            await asyncio.wait_for(ready, self.start_timeout_s)
        except TimeoutError:
            raise TimeoutError(
                f"Ray did not start {len(actors)} evaluation actor(s) (1 CPU each) within "
                f"{self.start_timeout_s:g} s; the cluster has {ray.available_resources()!r} "
                "available (raise workers' CPUs, or start_timeout_s)"
            ) from None


def executor_named(name: str, workers: int = 1, address: str | None = None) -> UnitExecutor:
    """``"thread"``, ``"process"`` or ``"ray"`` (the CLI's ``--executor``).

    Raises:
        ConfigError: another name, or a bad ``workers``.
    """
    if name == "thread":
        return ThreadExecutor()
    if name == "process":
        return ProcessExecutor(workers)
    if name == "ray":
        return RayExecutor(workers, address)
    raise ConfigError(f"executor must be one of thread, process, ray; got {name!r}")
