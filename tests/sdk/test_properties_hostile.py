"""Property-based tests with hostile values (huge, negative, NaN, infinite, bools, strings,
wrong types) at the public API: budgets, retry policies, ledger trees (sequential and
concurrent children) and controller episodes. The invariant, after every call:

* a defined outcome: the call succeeds, or raises an error of the budgetmix tree whose
  message names the argument (a tool's own exception is re-raised as it was);
* a call that raises changed no count in any ledger of the chain;
* every ancestor's counts are the sum of what was charged through it (nothing lost);
* no turn or tool-call limit is exceeded anywhere, and counts are ints;
* every episode ends with one :class:`EpisodeStatus`, each mistake recorded.
"""

from __future__ import annotations

import math
import random
import sys
import threading
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from _sdk_doubles import FakeClock
from budgetmix import (
    DIMENSIONS,
    AccountingPolicy,
    Budget,
    BudgetController,
    BudgetExhausted,
    BudgetmixError,
    Episode,
    EpisodeStatus,
    Ledger,
    MistakeKind,
    ProviderError,
    RetryPolicy,
)
from budgetmix.budget import MAX_COST_USD, MAX_COUNT, MAX_WALL_SECONDS
from budgetmix.provider_errors import TransientInfo
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

SETTINGS = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
FEW = settings(SETTINGS, max_examples=40)
MANY = settings(SETTINGS, max_examples=250)
COUNTS = ("turns", "tool_calls", "input_tokens", "output_tokens", "total_tokens")
CHARGED = (*COUNTS, "cost_usd")  # wall time is the clock's, never charged

# -- hostile values ---------------------------------------------------------------------------
EDGES: list[Any] = [0, -1, 1, MAX_COUNT, MAX_COUNT + 1, 2**63, 10**400, -(10**400), 1.5]
EDGES += [math.nan, math.inf, -math.inf, 1e308, 1e-300, -0.0, True, False, None, "3", b"3"]
EDGES += [[1], {"n": 1}, object()]
HOSTILE = st.one_of(
    st.sampled_from(EDGES),
    st.integers(-5, 40),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
)
SMALL = st.integers(0, 6)
COUNT_ARG = st.one_of(SMALL, SMALL, HOSTILE)  # mostly sane, often hostile
NAMES = st.one_of(
    st.lists(st.sampled_from(["search", "calc", "free"]), max_size=4),
    st.sampled_from(["search", ["a", 1], [None], None, 3, ("calc",), {"a": 1}]),
)
KINDS = st.one_of(st.sampled_from(list(MistakeKind)), st.sampled_from(["bogus", 3, None, ""]))


def assert_named(exc: BaseException, *names: str) -> None:
    """An error of the tree that names one of ``names``."""
    assert isinstance(exc, BudgetmixError), repr(exc)
    assert any(n in str(exc) for n in names), (str(exc), names)


def attempt(fn: Callable[[], Any], *names: str) -> tuple[bool, Any]:
    """``(True, result)``, or ``(False, error)`` for an error of the tree naming a field."""
    try:
        return True, fn()
    except BudgetExhausted as exc:
        _label("refused by a limit")
        return False, exc
    except BudgetmixError as exc:
        assert_named(exc, *names)
        _label(f"refused: {type(exc).__name__}")
        return False, exc


def _label(text: str) -> None:
    """Count an outcome (``--hypothesis-show-statistics``); hypothesis asks for its own thread."""
    if threading.current_thread() is threading.main_thread():
        event(text)


# -- budgets and retry policies ---------------------------------------------------------------
@SETTINGS
@given(values=st.dictionaries(st.sampled_from(DIMENSIONS), st.one_of(HOSTILE, SMALL), max_size=4))
def test_budget_is_valid_or_names_the_field(values: dict[str, Any]) -> None:
    kwargs = {"turns": 3, **values}
    for build in (lambda: Budget(**kwargs), lambda: Budget.from_dict(kwargs)):
        ok, out = attempt(build, *(f"Budget.{k}" for k in kwargs))
        if not ok:
            continue
        maximum = {"cost_usd": MAX_COST_USD, "wall_seconds": MAX_WALL_SECONDS}
        for dim, limit in out.limits().items():
            if limit is None:
                continue
            assert type(limit) is (int if dim in COUNTS else float), (dim, limit)
            assert 0 < limit <= maximum.get(dim, MAX_COUNT), (dim, limit)


RETRY_FIELDS = ("max_attempts", "initial_delay", "max_delay", "multiplier", "jitter")


@SETTINGS
@given(
    values=st.dictionaries(st.sampled_from(RETRY_FIELDS), st.one_of(HOSTILE, SMALL), max_size=3),
    attempt_number=st.integers(1, 10**6),
    retry_after=st.none() | st.floats(0, 1e9),
)
def test_retry_policy_is_valid_or_names_the_field(
    values: dict[str, Any], attempt_number: int, retry_after: float | None
) -> None:
    ok, policy = attempt(lambda: RetryPolicy(**values), *(f"RetryPolicy.{k}" for k in values))
    if ok:
        d = policy.delay(attempt_number, TransientInfo(True, 503, retry_after), random.Random(0))
        assert math.isfinite(d) and 0 <= d <= policy.max_delay * (1 + policy.jitter)


# -- ledger trees -----------------------------------------------------------------------------
LEDGER_OP = st.one_of(
    st.tuples(st.just("turn"), COUNT_ARG),
    st.tuples(st.just("refund"), COUNT_ARG),
    st.tuples(st.just("batch"), NAMES),
    st.tuples(st.just("refund_tool"), st.sampled_from(["search", "free", 3])),
    st.tuples(st.just("usage"), COUNT_ARG, COUNT_ARG, st.one_of(st.floats(0, 2), HOSTILE)),
    st.tuples(st.just("grant"), st.sampled_from([*DIMENSIONS, "bogus"]), COUNT_ARG),
)
LIMITED = st.builds(
    Budget,
    turns=st.integers(1, 8),
    tool_calls=st.none() | st.integers(1, 8),
    total_tokens=st.none() | st.integers(1, 60),
    cost_usd=st.none() | st.floats(0.5, 5),
)
ACCOUNTING = st.builds(
    AccountingPolicy,
    turn_unit=st.sampled_from(["response", "tool_call"]),
    refunded_tools=st.sampled_from([frozenset(), frozenset({"free"})]),
)
_FIELDS = {
    "turn": ("turns",),
    "refund": ("turns",),
    "batch": ("names",),
    "refund_tool": ("name",),
    "usage": ("usage.input_tokens", "usage.output_tokens", "usage.cost_usd"),
}


def apply(ledger: Ledger, op: tuple[Any, ...]) -> tuple[bool, Any]:
    """Run one op on ``ledger``; the outcome as :func:`attempt` gives it."""
    kind = op[0]
    calls: dict[str, Callable[[], Any]] = {
        "turn": lambda: ledger.try_charge_turn(op[1]),
        "refund": lambda: ledger.refund_turn(op[1]),
        "batch": lambda: ledger.try_charge_tool_batch(op[1]),
        "refund_tool": lambda: ledger.refund_tool_call(op[1]),
        "usage": lambda: ledger.add_usage(input_tokens=op[1], output_tokens=op[2], cost_usd=op[3]),
        "grant": lambda: ledger.grant(**{op[1]: op[2]}),
    }
    return attempt(calls[kind], *_FIELDS.get(kind, (f"grant.{op[1]}", "grant:")))


def charged(ledger: Ledger) -> dict[str, float]:
    counts = ledger.counts()
    return {d: counts[d] for d in CHARGED}


def same(a: dict[str, float], b: dict[str, float]) -> bool:
    """Equal counts, and costs equal up to float rounding of the sums."""
    return all(a[d] == b[d] for d in COUNTS) and math.isclose(
        a["cost_usd"], b["cost_usd"], rel_tol=1e-9, abs_tol=1e-9
    )


def assert_sound(ledgers: list[Ledger]) -> None:
    """Counts are ints (cost a float), never negative, never over a turn/tool-call limit."""
    for node in ledgers:
        used, limits = node.counts(), node.limits()
        for dim in COUNTS:
            assert type(used[dim]) is int and used[dim] >= 0, (dim, used[dim])
        assert math.isfinite(used["cost_usd"]) and used["cost_usd"] >= 0
        for dim in ("turns", "tool_calls"):
            lim = limits[dim]
            assert lim is None or used[dim] <= lim, (dim, used[dim], lim)


@MANY
@given(
    budgets=st.lists(LIMITED, min_size=1, max_size=4),
    parents=st.lists(st.integers(0, 3), min_size=3, max_size=3),
    accounting=ACCOUNTING,
    ops=st.lists(st.tuples(st.integers(0, 3), LEDGER_OP), max_size=30),
)
def test_ledger_tree_charges_are_atomic_and_add_up(
    budgets: list[Budget], parents: list[int], accounting: AccountingPolicy, ops: list[Any]
) -> None:
    ledgers: list[Ledger] = []
    for i, budget in enumerate(budgets):  # ledger i hangs below some earlier ledger
        parent = ledgers[parents[i - 1] % i] if i else None
        ledgers.append(Ledger(budget, parent=parent, accounting=accounting, clock=FakeClock()))
    expected = [charged(node) for node in ledgers]
    for index, op in ops:
        ledger = ledgers[index % len(ledgers)]
        before = charged(ledger)
        ok, _ = apply(ledger, op)
        after = charged(ledger)
        if not ok:
            assert same(after, before), ("an error charged", op)
        delta = {d: after[d] - before[d] for d in CHARGED}
        for node in ledger.chain():  # what was charged here was charged in every ancestor
            exp = expected[ledgers.index(node)]
            for d in CHARGED:
                exp[d] += delta[d]
        for node, exp in zip(ledgers, expected, strict=True):
            assert same(charged(node), exp), (op, charged(node), exp)
        assert_sound(ledgers)


@FEW
@given(
    parent_budget=LIMITED,
    children=st.lists(st.tuples(LIMITED, st.lists(LEDGER_OP, max_size=15)), min_size=2, max_size=4),
)
def test_concurrent_children_lose_no_charge(
    parent_budget: Budget, children: list[tuple[Budget, list[Any]]]
) -> None:
    root = Ledger(parent_budget, clock=FakeClock())
    kids = [Ledger(b, parent=root, clock=FakeClock()) for b, _ in children]
    errors: list[BaseException] = []
    start = threading.Barrier(len(kids))

    def worker(ledger: Ledger, ops: list[Any]) -> None:
        try:
            start.wait()
            for op in ops:
                before = charged(ledger)
                ok, _ = apply(ledger, op)
                assert ok or same(charged(ledger), before), ("an error charged", op)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    pairs = zip(kids, children, strict=True)
    threads = [threading.Thread(target=worker, args=(k, ops)) for k, (_, ops) in pairs]
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often: interleave the charges
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    if errors:
        raise errors[0]
    assert_sound([root, *kids])
    total = charged(root)
    for d in COUNTS:
        assert total[d] == sum(charged(k)[d] for k in kids), d
    assert math.isclose(total["cost_usd"], sum(charged(k)["cost_usd"] for k in kids))


# -- controller episodes ----------------------------------------------------------------------
class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str")


BATCH = st.tuples(st.just("batch"), NAMES, st.sampled_from(["ok", "error", "unprintable"]))
EPISODE_OP = st.one_of(
    st.tuples(st.just("turn")),
    st.tuples(st.just("turn")),
    st.tuples(st.just("usage"), COUNT_ARG, COUNT_ARG, st.one_of(st.floats(0, 1), HOSTILE)),
    BATCH,
    BATCH,
    st.tuples(
        st.just("grant"), st.sampled_from(["turns", "tool_calls", "cost_usd", "x"]), COUNT_ARG
    ),
    st.tuples(st.just("mistake"), KINDS, st.sampled_from(["d", 7])),
    st.tuples(st.just("step"), st.booleans()),
    st.tuples(st.just("call"), st.booleans()),
    st.tuples(st.just("finish"), st.booleans()),
)
PROGRAM = st.lists(EPISODE_OP, max_size=16)


class Runner:
    """Drives an episode; keeps the expected charges of every ledger and the mistakes."""

    def __init__(self) -> None:
        self.expected: dict[int, dict[str, float]] = {}
        self.mistakes: dict[str, int] = {}
        self.episodes: list[Episode] = []

    def track(self, ep: Episode) -> Episode:
        self.episodes.append(ep)
        self.expected[id(ep.ledger)] = charged(ep.ledger)
        self.mistakes[ep.id] = 0
        return ep

    def step(self, ep: Episode, turn: Any, op: tuple[Any, ...]) -> Any:
        """One op; returns the turn in progress (``StopIteration`` when the loop ends)."""
        before = charged(ep.ledger)
        try:
            turn = self._op(ep, turn, op)
        finally:
            delta = {d: v - before[d] for d, v in charged(ep.ledger).items()}
            for node in ep.ledger.chain():
                exp = self.expected[id(node)]
                for d in CHARGED:
                    exp[d] += delta[d]
        return turn

    def _op(self, ep: Episode, turn: Any, op: tuple[Any, ...]) -> Any:
        kind = op[0]
        if kind == "turn":
            new = ep.try_begin_turn(model="m")
            if new is None:
                raise StopIteration
            return new
        if kind == "usage" and turn is not None:
            usage = {"input_tokens": op[1], "output_tokens": op[2], "cost_usd": op[3]}
            attempt(lambda: turn.usage(**usage), *(f"usage.{k}" for k in usage))
        elif kind == "batch":
            self._batch(ep, op[1], op[2])
        elif kind == "grant":
            attempt(lambda: ep.grant(**{op[1]: op[2]}), f"grant.{op[1]}", "grant:")
        elif kind == "mistake":
            ok, _ = attempt(lambda: ep.record_mistake(op[1], detail=op[2]), "kind", "detail")
            self.mistakes[ep.id] += ok
        elif kind == "step":
            ep.record_step(ok=op[1])
            self.mistakes[ep.id] += not op[1]
        elif kind == "call" and turn is not None:
            self._call(ep, turn, succeed=op[1])
        elif kind == "finish":
            ep.finish(success=op[1])
            raise StopIteration
        return turn

    def _batch(self, ep: Episode, names: Any, outcome: str) -> None:
        ok, calls = attempt(lambda: ep.tool_batch(names), "names")
        if not ok:
            return
        for call in calls:
            if outcome == "ok":
                call.run(lambda: "result")
                continue
            error = Unprintable() if outcome == "unprintable" else ValueError("tool broke")
            try:
                call.run(_raiser(error))
            except (Unprintable, ValueError) as exc:
                assert exc is error  # the tool's own exception, not a replacement
            else:  # pragma: no cover - the tool's exception must come back
                raise AssertionError("the tool's exception was swallowed")
            self.mistakes[ep.id] += 1

    def _call(self, ep: Episode, turn: Any, *, succeed: bool) -> None:
        try:
            turn.call(lambda: "reply" if succeed else _raiser(ValueError("400"))())
        except ProviderError:  # recorded as a provider_error mistake
            self.mistakes[ep.id] += 1
        except BudgetExhausted:  # a failed request gave its turn back; none left to resend
            pass

    def run(self, ep: Episode, program: list[Any], children: list[list[Any]]) -> None:
        turn = None
        for i, op in enumerate(program):
            if i < len(children):
                self.child(ep, children[i])
            try:
                turn = self.step(ep, turn, op)
            except StopIteration:
                return

    def child(self, parent: Episode, program: list[Any]) -> None:
        with suppress(BudgetExhausted), self.track(parent.child(Budget(turns=3))) as child:
            self.run(child, program, [])


def _raiser(error: BaseException) -> Callable[[], Any]:
    def fail() -> Any:
        raise error

    return fail


@MANY
@given(
    budget=LIMITED,
    accounting=ACCOUNTING,
    mode=st.sampled_from(["end", "raise", "grace"]),
    program=PROGRAM,
    children=st.lists(PROGRAM, max_size=2),
)
def test_episodes_end_defined_and_consistent(
    budget: Budget, accounting: AccountingPolicy, mode: Any, program: list[Any], children: Any
) -> None:
    c = BudgetController(
        Budget(turns=1),
        accounting=accounting,
        exhaustion=mode,
        retry=RetryPolicy(max_attempts=1),
        clock=FakeClock(),
    )
    runner = Runner()
    with suppress(BudgetExhausted), runner.track(c.episode(budget=budget)) as ep:
        runner.run(ep, program, children)
    for episode in runner.episodes:
        result = episode.result
        assert result is not None and isinstance(result.status, EpisodeStatus)
        assert result.status is not EpisodeStatus.ERROR, result.error
        assert len(result.mistakes) == runner.mistakes[episode.id], result.mistakes
        assert all(type(result.used[d]) is int for d in COUNTS), result.used
        assert same(charged(episode.ledger), runner.expected[id(episode.ledger)])
        event(f"{'child' if episode.parent else 'root'} {result.status}")
        if result.used["tool_calls"]:
            event("tool calls charged")
    assert_sound([e.ledger for e in runner.episodes])
