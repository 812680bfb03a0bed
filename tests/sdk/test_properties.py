"""Property-based tests: over random programs of turns, parallel tool batches, tool
failures, transient retries, grants, usage, mistakes, child episodes and concurrent
episodes (threads and asyncio tasks) sharing a parent budget:

* no turn or tool-call limit is ever exceeded, in any ledger of the tree, at any time;
* a refusal is never spurious: some limit of the chain really binds;
* a refused batch charges nothing;
* retries never sleep past the wall budget;
* every episode ends with exactly one terminal status;
* a parent's counts are exactly the sum of its children's (no lost updates).
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

from _sdk_doubles import FakeClock
from budgetmix import (
    AccountingPolicy,
    Budget,
    BudgetController,
    BudgetExhausted,
    ConfigError,
    Episode,
    EpisodeResult,
    EpisodeStatus,
    Hooks,
    MistakeKind,
    ProviderError,
    RetryPolicy,
)
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

SETTINGS = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
CONCURRENT = settings(SETTINGS, max_examples=60)

# -- strategies -----------------------------------------------------------------------
TOOLS = st.sampled_from(["search", "calc", "free"])  # "free" may be a refunded tool
ACCOUNTING = st.builds(
    AccountingPolicy,
    turn_unit=st.sampled_from(["response", "tool_call"]),
    count_retries=st.booleans(),
    count_failed_requests=st.booleans(),
    count_failed_tool_calls=st.booleans(),
    refunded_tools=st.sampled_from([frozenset(), frozenset({"free"})]),
)
BUDGETS = st.builds(
    Budget,
    turns=st.integers(1, 5),
    tool_calls=st.none() | st.integers(1, 6),
    total_tokens=st.none() | st.integers(50, 400),
    wall_seconds=st.none() | st.sampled_from([0.05, 1.0]),
)
_OP_STRATEGIES: dict[str, st.SearchStrategy[tuple[Any, ...]]] = {
    "turn": st.just(("turn",)),
    "batch": st.tuples(st.just("batch"), st.lists(st.tuples(TOOLS, st.booleans()), max_size=5)),
    # transient failures before the outcome; then success or a non-transient failure
    "retry": st.tuples(st.just("retry"), st.integers(0, 3), st.booleans()),
    "grant": st.tuples(
        st.just("grant"), st.sampled_from(["turns", "tool_calls"]), st.integers(1, 2)
    ),
    "usage": st.tuples(st.just("usage"), st.integers(0, 80)),
    "mistake": st.tuples(st.just("mistake"), st.sampled_from(list(MistakeKind))),
    "step": st.tuples(st.just("step"), st.booleans()),
    "yield": st.just(("yield",)),
    "tick": st.tuples(st.just("tick"), st.sampled_from([0.02, 0.5])),  # model latency
}
# turns and tool batches are what spends a budget: draw them three times as often
_WEIGHTED = ["turn"] * 3 + ["batch"] * 3 + [k for k in _OP_STRATEGIES if k not in ("turn", "batch")]
OPS = st.sampled_from(_WEIGHTED).flatmap(_OP_STRATEGIES.__getitem__)


def _program(ops: st.SearchStrategy[Any], max_size: int) -> st.SearchStrategy[list[Any]]:
    """A loop body, maybe ended by ``finish(success=...)``."""
    return st.builds(
        lambda body, end: body if end is None else [*body, ("finish", end)],
        st.lists(ops, min_size=2, max_size=max_size),
        st.none() | st.booleans(),
    )


PROGRAM = _program(OPS, 14)
CHILD_OP = st.tuples(st.just("child"), BUDGETS, PROGRAM)
TOP_PROGRAM = _program(st.one_of(OPS, OPS, CHILD_OP), 16)
MODES = st.sampled_from(["end", "raise", "grace"])


# -- the checks -----------------------------------------------------------------------
def assert_within_limits(ep: Episode) -> None:
    """No ledger from ``ep`` up to the root is over its turn or tool-call limit."""
    for node in ep.ledger.chain():
        limits, used = node.limits(), node.counts()
        for dim in ("turns", "tool_calls"):
            lim = limits[dim]
            assert lim is None or used[dim] <= lim, (dim, used[dim], lim)
        assert used["turns"] >= 0 and used["tool_calls"] >= 0


class Invariants(Hooks):
    """Checks the limits at every hook point and records each episode's end."""

    def __init__(self) -> None:
        self.finished: list[tuple[str, EpisodeResult]] = []
        self.violations: list[str] = []  # hooks' exceptions are swallowed by design
        self.lock = threading.Lock()

    def _check(self, episode: Episode) -> None:
        try:
            assert_within_limits(episode)
        except AssertionError as exc:
            self.violations.append(repr(exc))

    def on_turn(self, episode: Episode, turn: int) -> None:
        self._check(episode)

    def on_tool_result(self, episode: Episode, call: Any) -> None:
        self._check(episode)

    def on_exhausted(self, episode: Episode, dimension: str) -> None:
        self._check(episode)

    def on_finish(self, episode: Episode, result: EpisodeResult) -> None:
        with self.lock:
            self.finished.append((episode.id, result))

    def assert_one_end_each(self, episodes: list[Episode]) -> None:
        assert self.violations == []
        ids = [eid for eid, _ in self.finished]
        assert sorted(ids) == sorted(ep.id for ep in episodes), "one on_finish per episode"
        by_id = dict(self.finished)
        for ep in episodes:
            r = ep.result
            assert r is not None and r is by_id[ep.id]
            assert isinstance(r.status, EpisodeStatus)
            assert ep.finished
            if r.status is EpisodeStatus.BUDGET_EXHAUSTED:
                assert r.stop_reason in ep.ledger.limits()
            for dim in ("turns", "tool_calls"):
                lim = r.limits[dim]
                assert lim is None or r.used[dim] <= lim


class Transient(Exception):
    status_code = 503


@dataclass
class Driver:
    """Runs a program against an episode the way a hand-written agent loop would."""

    clock: FakeClock
    # siblings running at the same time may refund into a shared parent, so a refusal
    # is checked against the ancestors only when nothing runs concurrently
    concurrent: bool = False
    episodes: list[Episode] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def track(self, ep: Episode) -> Episode:
        with self.lock:
            self.episodes.append(ep)
        return ep

    def sleeper(self, ep: Episode) -> Any:
        def sleep(seconds: float) -> None:
            for node in ep.ledger.chain():
                lim = node.limit("wall_seconds")
                assert lim is None or seconds < lim - node.elapsed(), "slept past the wall"
            self.clock.sleep(seconds)

        return sleep

    @staticmethod
    def flaky(transient: int, succeed: bool) -> Any:
        state = {"n": 0}

        def request() -> str:
            state["n"] += 1
            if state["n"] <= transient:
                raise Transient("busy")
            if not succeed:
                raise ValueError("bad request")
            return "reply"

        return request

    def assert_refusal_is_real(self, ep: Episode) -> None:
        if not self.concurrent:
            assert ep.ledger.blocking_dimension() is not None, "refused with budget left"

    def batch(self, ep: Episode, turn: Any, calls: list[tuple[str, bool]]) -> None:
        names = [n for n, _ in calls]
        chain = ep.ledger.chain() if not self.concurrent else [ep.ledger]
        before = [node.counts() for node in chain]
        try:
            handles = ep.tool_batch(names, [f"c{i}" for i in range(len(names))])
        except BudgetExhausted as exc:
            after = [node.counts() for node in chain]
            for b, a in zip(before, after, strict=True):
                assert (b["turns"], b["tool_calls"]) == (a["turns"], a["tool_calls"])
            if not (turn is not None and turn.grace) and not self.concurrent:
                self.assert_batch_did_not_fit(ep, names, exc.dimension)
            raise
        for handle, fails in zip(handles, calls, strict=True):
            if fails[1]:
                with suppress(ZeroDivisionError):
                    handle.run(lambda: 1 / 0)
            else:
                handle.run(lambda: "ok")
            assert_within_limits(ep)

    @staticmethod
    def assert_batch_did_not_fit(ep: Episode, names: list[str], dimension: str) -> None:
        acc = ep.ledger.accounting
        need = {
            "tool_calls": acc.tool_calls_for_batch(names),
            "turns": acc.extra_turns_for_batch(names),
        }[dimension]
        assert any(
            node.limit(dimension) is not None
            and node.counts()[dimension] + need > (node.limit(dimension) or 0)
            for node in ep.ledger.chain()
        ), (dimension, names)

    def simple(self, ep: Episode, turn: Any, op: tuple[Any, ...]) -> Any:
        """Ops that are the same in sync and async loops; returns the current turn."""
        kind = op[0]
        if kind == "turn":
            messages = [{"role": "user", "content": "task"}]
            new = ep.try_begin_turn(model="m")
            if new is None:
                self.assert_refusal_is_real(ep)
                raise StopIteration
            request = new.openai_chat(messages)
            assert messages == [{"role": "user", "content": "task"}]
            assert len(request) == 1 + (new.notice is not None)
            return new
        if kind == "batch":
            self.batch(ep, turn, op[1])
        elif kind == "grant":
            dim, amount = op[1], op[2]
            if ep.ledger.limit(dim) is None:
                try:
                    ep.grant(**{dim: amount})
                except ConfigError:
                    pass
                else:  # pragma: no cover - a grant on an unlimited dimension must fail
                    raise AssertionError("grant on an unlimited dimension accepted")
            else:
                ep.grant(**{dim: amount})
        elif kind == "usage" and turn is not None:
            turn.usage(input_tokens=op[1], output_tokens=op[1] // 4)
        elif kind == "mistake":
            ep.record_mistake(op[1], detail="scripted")
        elif kind == "step":
            ep.record_step(ok=op[1])
        elif kind == "tick":
            self.clock.advance(op[1])
        elif kind == "finish":
            ep.finish(success=op[1])
            raise StopIteration
        assert_within_limits(ep)
        return turn

    # -- sync loop ----------------------------------------------------------------------
    def run(self, ep: Episode, program: list[tuple[Any, ...]]) -> None:
        turn = None
        for op in program:
            if op[0] == "child":
                self.run_child(ep, op[1], op[2])
            elif op[0] == "retry":
                if turn is not None:
                    try:
                        turn.call(self.flaky(op[1], op[2]), sleep=self.sleeper(ep))
                    except ProviderError:
                        pass
                    except BudgetExhausted:
                        self.assert_refusal_is_real(ep)
                        raise
            elif op[0] == "yield":
                time.sleep(0)
            else:
                try:
                    turn = self.simple(ep, turn, op)
                except StopIteration:
                    return
            assert_within_limits(ep)

    def run_child(self, parent: Episode, budget: Budget, program: list[Any]) -> None:
        try:
            with self.track(parent.child(budget)) as child:
                self.run(child, program)
        except BudgetExhausted:  # exhaustion="raise" lets the child's refusal out
            pass

    def episode(self, ep: Episode, program: list[Any]) -> None:
        try:
            with self.track(ep):
                self.run(ep, program)
        except BudgetExhausted:
            pass

    # -- async loop ---------------------------------------------------------------------
    async def arun(self, ep: Episode, program: list[tuple[Any, ...]]) -> None:
        turn = None
        for op in program:
            if op[0] == "child":
                continue  # nested children are covered by the sync loop
            if op[0] == "retry":
                if turn is not None:
                    sleep = self.sleeper(ep)

                    async def asleep(seconds: float, sleep: Any = sleep) -> None:
                        sleep(seconds)
                        await asyncio.sleep(0)

                    flaky = self.flaky(op[1], op[2])

                    async def request(flaky: Any = flaky) -> str:
                        await asyncio.sleep(0)
                        return str(flaky())

                    try:
                        await turn.acall(request, sleep=asleep)
                    except ProviderError:
                        pass
                    except BudgetExhausted:
                        self.assert_refusal_is_real(ep)
                        raise
            elif op[0] == "yield":
                await asyncio.sleep(0)
            else:
                try:
                    turn = self.simple(ep, turn, op)
                except StopIteration:
                    return
                await asyncio.sleep(0)
            assert_within_limits(ep)

    async def aepisode(self, ep: Episode, program: list[Any]) -> None:
        try:
            async with self.track(ep):
                await self.arun(ep, program)
        except BudgetExhausted:
            pass


def _controller(
    clock: FakeClock, accounting: AccountingPolicy, mode: str, hooks: Invariants
) -> BudgetController:
    return BudgetController(
        Budget(turns=1),  # every test passes its own budgets
        accounting=accounting,
        exhaustion=mode,  # type: ignore[arg-type]
        hooks=[hooks],
        retry=RetryPolicy(max_attempts=3, initial_delay=0.01, multiplier=2.0, jitter=0.5),
        clock=clock,
    )


def _assert_sums(parent: Episode, children: list[Episode]) -> None:
    """The parent took nothing itself, so its counts are exactly its children's."""
    assert parent.result is not None
    for dim in ("turns", "tool_calls", "input_tokens", "total_tokens"):
        total = sum(c.result.used[dim] for c in children if c.result is not None)
        assert parent.result.used[dim] == total, dim


def _describe(episodes: list[Episode]) -> None:
    """Label examples (``--hypothesis-show-statistics``) to show what was covered."""
    for ep in episodes:
        r = ep.result
        assert r is not None
        event(f"{'child' if ep.parent else 'root'} {r.status} {r.stop_reason or ''}".strip())
        if r.used["tool_calls"]:
            event("used tool calls")
        if r.mistakes:
            event("had mistakes")


@contextmanager
def _fast_thread_switching() -> Iterator[None]:
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


# -- the properties -------------------------------------------------------------------
@SETTINGS
@given(budget=BUDGETS, accounting=ACCOUNTING, mode=MODES, program=TOP_PROGRAM)
def test_one_episode_with_sequential_children(
    budget: Budget, accounting: AccountingPolicy, mode: str, program: list[Any]
) -> None:
    clock, hooks = FakeClock(), Invariants()
    c = _controller(clock, accounting, mode, hooks)
    driver = Driver(clock)
    driver.episode(c.episode(budget=budget), program)
    hooks.assert_one_end_each(driver.episodes)
    for ep in driver.episodes:
        assert_within_limits(ep)
    _describe(driver.episodes)


@CONCURRENT
@given(
    parent_budget=BUDGETS,
    accounting=ACCOUNTING,
    mode=MODES,
    children=st.lists(st.tuples(BUDGETS, PROGRAM), min_size=2, max_size=5),
)
def test_concurrent_threads_share_a_parent(
    parent_budget: Budget,
    accounting: AccountingPolicy,
    mode: str,
    children: list[tuple[Budget, list[Any]]],
) -> None:
    clock, hooks = FakeClock(), Invariants()
    c = _controller(clock, accounting, mode, hooks)
    driver = Driver(clock, concurrent=True)
    errors: list[BaseException] = []
    start = threading.Barrier(len(children))

    def worker(parent: Episode, budget: Budget, program: list[Any]) -> None:
        try:
            start.wait()
            driver.episode(parent.child(budget), program)
        except BaseException as exc:  # surfaced below: assertion failures in threads
            errors.append(exc)

    with _fast_thread_switching(), driver.track(c.episode(budget=parent_budget)) as parent:
        threads = [threading.Thread(target=worker, args=(parent, b, p)) for b, p in children]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert_within_limits(parent)
    if errors:
        raise errors[0]
    hooks.assert_one_end_each(driver.episodes)
    _assert_sums(parent, [e for e in driver.episodes if e is not parent])
    _describe(driver.episodes)


@CONCURRENT
@given(
    parent_budget=BUDGETS,
    accounting=ACCOUNTING,
    mode=MODES,
    children=st.lists(st.tuples(BUDGETS, PROGRAM), min_size=2, max_size=5),
)
def test_concurrent_asyncio_tasks_share_a_parent(
    parent_budget: Budget,
    accounting: AccountingPolicy,
    mode: str,
    children: list[tuple[Budget, list[Any]]],
) -> None:
    clock, hooks = FakeClock(), Invariants()
    c = _controller(clock, accounting, mode, hooks)
    driver = Driver(clock, concurrent=True)

    async def main() -> Episode:
        async with driver.track(c.episode(budget=parent_budget)) as parent:
            await asyncio.gather(*(driver.aepisode(parent.child(b), p) for b, p in children))
            assert_within_limits(parent)
        return parent

    parent = asyncio.run(main())
    hooks.assert_one_end_each(driver.episodes)
    _assert_sums(parent, [e for e in driver.episodes if e is not parent])
    _describe(driver.episodes)
