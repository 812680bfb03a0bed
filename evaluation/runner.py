"""The Pass@(K,T) evaluator: every task x budget T x sample k, concurrently, under the controller.

Each episode runs under a :class:`~budgetmix.BudgetController` episode with
``Budget(turns=T)``::

    observation = env.reset(env_seed); agent.start(env, seed)
    while (turn := ep.try_begin_turn()) is not None:      # None: the budget is spent
        action = agent.act(observation, turn.notice, turns_remaining)
        result = env.step(action)
        ep.record_step(ok=label.valid and not label.mistake, progress=..., mistake=...)
        if result.success: ep.finish(True); break
        if result.done: ep.finish(False); break

Seeds: the agent seed is derived from ``(config.seed, task_id, sample)`` and does
not depend on T (common random numbers across budgets). The environment is
reset with ``task.seed`` (``env_seed_mode="task"``, the default: for HumanEval
and the faulty-tools env the reset seed *is* the task) or with a seed derived
per sample (``"sample"``: K independent slip sequences on a fixed FrozenLake map).

Prefix sharing: an agent declared budget-blind (``sees_budget=False``) never
sees ``notice`` or ``turns_remaining``, so its run at budget T is the first T
turns of its run at any larger budget. One run per (task, sample) at the
largest missing T then yields every smaller T by :func:`~.trajectory.replay`.
Agents that see their budget run separately per T.

Results stream to a JSONL file (:mod:`.results`); finished episodes are never
rerun, so an interrupted run resumes where it stopped and a rerun of a
finished grid does no work. Agent exceptions other than
:class:`~budgetmix.ProviderError` abort the run (``on_error="raise"``, so a bug
is not counted as a task failure) or are recorded as category ``error``.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypedDict, TypeVar, Unpack

from budgetmix._validate import check_choice, check_int, check_ints
from budgetmix.accounting import DEFAULT_ACCOUNTING
from budgetmix.budget import Budget
from budgetmix.controller import BudgetController
from budgetmix.environment import (
    AgentReply,
    AsyncEnvAgent,
    EnvAgent,
    Environment,
    FaultInjection,
    Task,
    is_async_agent,
)
from budgetmix.evaluation._drive import Call, Core, drive_async, drive_sync
from budgetmix.evaluation.executors import ThreadExecutor, UnitExecutor
from budgetmix.evaluation.results import EpisodeRecord, EvalRun, ResultsWriter
from budgetmix.evaluation.trajectory import (
    EpisodeKey,
    Trajectory,
    apply_exception,
    apply_step,
    make_record,
    observed_step,
    record_usage,
    replay,
)
from budgetmix.events import EpisodeResult
from budgetmix.exceptions import ConfigError, ProviderError
from budgetmix.notice import DEFAULT_NOTICE_FORMAT, NOTICE_FORMATS
from budgetmix.policies import (
    NotifyEveryTurn,
    NotifyNever,
    build_controller_kwargs,
    policy_from_config,
)
from opentelemetry import metrics, trace

__all__ = ["AgentFactory", "EvalConfig", "EvalRun", "Evaluator", "RunOptions", "derive_seed"]

R = TypeVar("R")
#: what one played episode gives: its trajectory and its result
Played = tuple[Trajectory, EpisodeResult]

#: Builds a fresh agent per episode (agents keep per-episode state).
AgentFactory = Callable[[], EnvAgent | AsyncEnvAgent]


def derive_seed(*parts: object) -> int:
    """A stable 31-bit seed from ``parts`` (independent of ``PYTHONHASHSEED``)."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


@dataclass(frozen=True, slots=True, kw_only=True)
class EvalConfig:
    """The grid and how to run it.

    Args:
        budgets: turn budgets T (deduplicated, sorted).
        samples: K, attempts per (task, T).
        concurrency: episodes in flight at once.
        notice_format: notice shown to budget-aware agents (``None``: no notice).
        seed: base of every derived seed.
        env_seed_mode: ``"task"`` (reset with ``task.seed``) or ``"sample"``.
        training_ceiling: budgets above it are labelled ``extrapolated``.
        fault_step: inject an environment failure at this 1-based step
            (:class:`~budgetmix.environment.FaultInjection`).
        prefix_sharing: derive smaller budgets of budget-blind agents by truncation.
        on_error: ``"raise"`` (abort on an agent bug) or ``"record"`` (category ``error``).
        env_in_thread: run ``env.reset``/``env.step`` in the thread pool.
        identity: what else identifies the run (env, agent); part of the fingerprint.
        policy: a policy config mapping (``budgetmix.policies.policy_from_config``:
            notice, exhaustion, extension, early_stop, accounting), the same one the
            demo and training read. Its notice rule replaces ``notice_format``'s.
            Prefix sharing is off when it extends budgets or grants a grace turn
            (a truncated run would then differ from a real one).

    Raises:
        ConfigError: a bad field (named in the message).
    """

    budgets: tuple[int, ...]
    samples: int = 1
    concurrency: int = 8
    notice_format: str | None = DEFAULT_NOTICE_FORMAT
    seed: int = 0
    env_seed_mode: Literal["task", "sample"] = "task"
    training_ceiling: int | None = None
    fault_step: int | None = None
    prefix_sharing: bool = True
    on_error: Literal["raise", "record"] = "raise"
    env_in_thread: bool = True
    identity: Mapping[str, Any] = field(default_factory=dict)
    policy: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.policy is not None:
            policy_from_config(self.policy)  # fail now, naming the bad field
        budgets = check_ints("budgets", tuple(self.budgets), minimum=1)
        object.__setattr__(self, "budgets", tuple(sorted(set(budgets))))
        for name in ("samples", "concurrency"):
            check_int(name, getattr(self, name), minimum=1)
        if self.notice_format is not None:
            check_choice("notice_format", self.notice_format, sorted(NOTICE_FORMATS))
        check_choice("env_seed_mode", self.env_seed_mode, ("task", "sample"))
        check_choice("on_error", self.on_error, ("raise", "record"))
        for name in ("training_ceiling", "fault_step"):
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name), minimum=1)

    def run_identity(self, sees_budget: bool) -> dict[str, Any]:
        """What the results-file fingerprint covers (not the grid, which may grow)."""
        return {
            **dict(self.identity),
            "sees_budget": sees_budget,
            "notice_format": self.notice_format if sees_budget else None,
            "seed": self.seed,
            "env_seed_mode": self.env_seed_mode,
            "fault_step": self.fault_step,
            **({"policy": dict(self.policy)} if self.policy is not None else {}),
        }


@dataclass(frozen=True, slots=True)
class _Unit:
    task: Task
    sample: int
    budgets: tuple[int, ...]  # records to produce; the live run is at the largest


class RunOptions(TypedDict, total=False):
    """The keyword options of :meth:`Evaluator.arun`, which :meth:`Evaluator.run` passes on."""

    on_record: Callable[[EpisodeRecord], None] | None
    on_plan: Callable[[int, int], None] | None
    overwrite: bool
    executor: UnitExecutor | None


class _Tally:
    """Writes each unit's records as it finishes and counts what the run did."""

    def __init__(
        self, writer: ResultsWriter, on_record: Callable[[EpisodeRecord], None] | None
    ) -> None:
        self.writer = writer
        self.on_record = on_record
        self.live = self.derived = self.steps = self.separate = 0

    def add(self, records: Sequence[EpisodeRecord], steps: int) -> None:
        """One live episode of ``steps`` env steps and the records it yielded."""
        self.live += 1
        self.steps += steps
        for rec in records:
            self.derived += int(rec.derived)
            self.separate += rec.env_calls
            self.writer.write(rec)
            if self.on_record is not None:
                self.on_record(rec)


class Evaluator:
    """Runs ``agent_factory()`` agents on ``tasks`` for every budget and sample.

    Raises:
        ConfigError: no tasks, duplicate task ids, or a policy granting a grace turn to
            an agent trained without one (its ``trained_grace_turn`` is ``False``).
    """

    def __init__(
        self,
        agent_factory: AgentFactory,
        tasks: Sequence[Task],
        config: EvalConfig,
    ) -> None:
        if not tasks:
            raise ConfigError("tasks must not be empty")
        ids = [t.task_id for t in tasks]
        if len(set(ids)) != len(ids):
            raise ConfigError("tasks: duplicate task_id")
        self.agent_factory = agent_factory
        self.tasks = tuple(tasks)
        self.config = config
        probe = agent_factory()
        self.sees_budget = bool(getattr(probe, "sees_budget", True))
        self.is_async = is_async_agent(probe)
        policy_kwargs: dict[str, Any] = {}
        self._truncation_safe = True
        if config.policy is not None:
            policy_kwargs = build_controller_kwargs(config.policy)
            grace = policy_kwargs.get("exhaustion") == "grace"
            if grace and getattr(probe, "trained_grace_turn", None) is False:
                raise ConfigError(
                    "policy.exhaustion: 'grace' for an agent trained without a grace turn "
                    "(training_env.json: grace_turn false); use 'end' or 'raise', or set "
                    "agent.trained_grace_turn = None to grant one on purpose (docs/layout.md)"
                )
            self._truncation_safe = (
                policy_kwargs.get("extension") is None
                and policy_kwargs.get("exhaustion", "end") != "grace"
            )
        notice = (
            NotifyNever()  # agents still get turns_remaining
            if config.notice_format is None or not self.sees_budget
            else policy_kwargs.pop("notice", None) or NotifyEveryTurn(config.notice_format)
        )
        policy_kwargs.pop("notice", None)
        self._controller = BudgetController(
            Budget(turns=1), name="eval", notice=notice, **policy_kwargs
        )
        # derived episodes are bookkeeping, not agent runs: keep them out of traces and metrics
        self._replayer = BudgetController(
            Budget(turns=1),
            name="replay",
            early_stop=policy_kwargs.get("early_stop"),
            accounting=policy_kwargs.get("accounting", DEFAULT_ACCOUNTING),
            notice=NotifyNever(),
            tracer_provider=trace.NoOpTracerProvider(),
            meter_provider=metrics.NoOpMeterProvider(),
        )
        self._pool: ThreadPoolExecutor | None = None

    # -- public ------------------------------------------------------------------------
    @property
    def shares_prefixes(self) -> bool:
        """Whether smaller budgets are derived from one live run (see the module docstring)."""
        cfg = self.config
        return cfg.prefix_sharing and not self.sees_budget and self._truncation_safe

    def run(self, results_path: str | Path, **options: Unpack[RunOptions]) -> EvalRun:
        """Synchronous :meth:`arun` (starts its own event loop)."""
        return asyncio.run(self.arun(results_path, **options))

    def plan(self, done: Mapping[tuple[str, int, int], object]) -> list[_Unit]:
        """The work still to do given the keys already in the results file."""
        cfg = self.config
        units: list[_Unit] = []
        shared = self.shares_prefixes
        for sample in range(cfg.samples):
            if shared:
                for task in self.tasks:
                    missing = tuple(b for b in cfg.budgets if (task.task_id, b, sample) not in done)
                    if missing:
                        units.append(_Unit(task, sample, missing))
                continue
            for b in cfg.budgets:
                for task in self.tasks:
                    if (task.task_id, b, sample) not in done:
                        units.append(_Unit(task, sample, (b,)))
        return units

    async def arun(
        self,
        results_path: str | Path,
        *,
        on_record: Callable[[EpisodeRecord], None] | None = None,
        on_plan: Callable[[int, int], None] | None = None,
        overwrite: bool = False,
        executor: UnitExecutor | None = None,
    ) -> EvalRun:
        """Run the missing part of the grid, appending records to ``results_path``.

        ``on_plan(to_produce, skipped)`` is called once before any episode (record
        counts); ``on_record(record)`` as each record is written. ``executor`` plays
        the episodes (:mod:`.executors`: threads by default, a process pool, Ray);
        this process writes every record, whichever ran it.

        Raises:
            ConfigError: the results file belongs to another run identity (the message
                names ``overwrite``, which starts afresh); the same identity resumes.
            Exception: whatever an agent raised, with ``on_error="raise"``.
        """
        cfg = self.config
        t0 = time.perf_counter()
        identity = cfg.run_identity(self.sees_budget)
        writer = ResultsWriter(results_path, identity, overwrite=overwrite)
        wanted = {
            (t.task_id, b, s) for t in self.tasks for b in cfg.budgets for s in range(cfg.samples)
        }
        skipped = sum(1 for k in writer.done if k in wanted)
        units = self.plan(writer.done)
        if on_plan is not None:
            on_plan(len(wanted) - skipped, skipped)
        tally = _Tally(writer, on_record)
        workers = min(cfg.concurrency, max(1, len(units)))
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="bm-eval")
        try:
            with writer:
                writer.write_run(self._run_header())
                await (executor or ThreadExecutor()).run_units(self, units, tally)
                all_records = tuple(writer.done[k] for k in sorted(wanted) if k in writer.done)
        finally:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        return EvalRun(
            path=Path(results_path),
            records=all_records,
            live_episodes=tally.live,
            derived_records=tally.derived,
            skipped=skipped,
            env_steps=tally.steps,
            env_steps_separate=tally.separate,
            elapsed_s=time.perf_counter() - t0,
            sees_budget=self.sees_budget,
        )

    # -- internals ---------------------------------------------------------------------
    def _run_header(self) -> dict[str, Any]:
        """The results file's ``run`` line: the grid this run asks for."""
        cfg = self.config
        return {
            "budgets": list(cfg.budgets),
            "samples": cfg.samples,
            "tasks": [t.task_id for t in self.tasks],
            "training_ceiling": cfg.training_ceiling,
            "prefix_sharing": self.shares_prefixes,
            "concurrency": cfg.concurrency,
        }

    async def _call(self, fn: Callable[..., R], *args: Any) -> R:
        """``fn(*args)`` in the pool, in a copy of this task's context: the agent sees its
        episode (``current_episode()``) and the current span there, as on the loop."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, contextvars.copy_context().run, fn, *args)

    def _key(self, task: Task, sample: int) -> EpisodeKey:
        cfg = self.config
        seed = derive_seed(cfg.seed, task.task_id, sample, "agent")
        env_seed = (
            task.seed
            if cfg.env_seed_mode == "task"
            else derive_seed(cfg.seed, task.task_id, task.seed, sample, "env")
        )
        return EpisodeKey(task.task_id, sample, seed, env_seed)

    def _make_env(self, task: Task) -> Environment:
        env = task.make_env()
        if self.config.fault_step is not None:
            return FaultInjection(env, self.config.fault_step)
        return env

    async def _run_unit(self, unit: _Unit) -> tuple[list[EpisodeRecord], int]:
        cfg = self.config
        key = self._key(unit.task, unit.sample)
        live_budget = max(unit.budgets)
        t0 = time.perf_counter()
        traj, result = await self._play(unit.task, key, live_budget)
        latency = time.perf_counter() - t0
        common = {"fault_step": cfg.fault_step, "training_ceiling": cfg.training_ceiling}
        records = [
            make_record(
                key,
                live_budget,
                result,
                traj,
                len(traj.steps),
                latency_s=latency,
                derived=False,
                **common,
            )
        ]
        for b in unit.budgets:
            if b == live_budget:
                continue
            res, used = replay(self._replayer, traj, b)
            lat = traj.setup_s + sum(s.latency_s for s in traj.steps[:used])
            records.append(
                make_record(key, b, res, traj, used, latency_s=lat, derived=True, **common)
            )
        records.sort(key=lambda r: r.budget)
        return records, len(traj.steps)

    async def _play(self, task: Task, key: EpisodeKey, budget: int) -> Played:
        """One episode, driven to fit the agent (:mod:`._drive`): a sync agent's whole
        episode in one pool thread (its environment there too, unless ``env_in_thread``
        is off), an async agent's on the loop."""
        core = self._episode(task, key, budget)
        if self.is_async or not self.config.env_in_thread:
            return await drive_async(core, self._call, agent_awaits=self.is_async,
                                     env_offloaded=self.config.env_in_thread)  # fmt: skip
        played: Played = await self._call(drive_sync, core)
        return played

    def _episode(self, task: Task, key: EpisodeKey, budget: int) -> Core[Played]:
        blind = not self.sees_budget
        traj = Trajectory(in_setup=True)
        ep = self._controller.episode(
            name=f"eval {task.task_id}",
            budget=Budget(turns=budget),
            metadata={"task_id": task.task_id, "budget": budget, "sample": key.sample},
        )
        with ep:
            try:
                t0 = time.perf_counter()
                agent = self.agent_factory()
                env = self._make_env(task)
                obs = yield Call(env.reset, (key.env_seed,), True)
                yield Call(agent.start, (env, key.seed), True)
                traj.setup_s = time.perf_counter() - t0
                traj.in_setup = False
                while True:
                    turn = ep.try_begin_turn()
                    if turn is None:
                        break
                    ts = time.perf_counter()
                    left = None if blind else ep.state.turns_remaining
                    notice = None if blind else turn.notice
                    reply = yield Call(agent.act, (obs, notice, left), False)
                    r = reply if isinstance(reply, AgentReply) else AgentReply(text=str(reply))
                    result = r.result  # set when the agent took the step itself
                    if result is None:
                        result = yield Call(env.step, (r.text,), True)
                    step = observed_step(result, r, latency_s=time.perf_counter() - ts)
                    traj.steps.append(step)
                    record_usage(turn, step)
                    obs = result.observation
                    if apply_step(ep, step):
                        break
            except ProviderError as exc:
                traj.exception, traj.error = "provider_error", f"{type(exc).__name__}: {exc}"
                apply_exception(ep, "provider_error", traj.error)
            except Exception as exc:
                if self.config.on_error == "raise":
                    raise
                traj.exception, traj.error = "error", f"{type(exc).__name__}: {exc}"[:500]
                apply_exception(ep, "error", traj.error)
        assert ep.result is not None
        return traj, ep.result
