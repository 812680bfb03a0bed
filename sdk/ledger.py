"""The ledger: I/O-free counts per dimension, checked before anything is dispatched.

A ledger may have a parent (a sub-agent's episode draws from its caller's
budget). Every ledger of one tree shares the root's lock, so a check-and-charge
over the whole ancestor chain is atomic across threads and asyncio tasks:
concurrent children can never overspend their parent together.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from budgetmix._validate import check_int, check_number, check_tool_names, shown
from budgetmix.accounting import DEFAULT_ACCOUNTING, AccountingPolicy
from budgetmix.budget import DIMENSIONS, MAX_COST_USD, Budget, check_limit, maximum_of
from budgetmix.exceptions import ConfigError

__all__ = ["Clock", "Ledger", "LedgerState", "fixed_clock_ledger"]

Clock = Callable[[], float]
_TOKEN_DIMS = ("input_tokens", "output_tokens", "total_tokens", "cost_usd")
_INTEGRAL_DIMS = frozenset({"turns", "tool_calls", "input_tokens", "output_tokens", "total_tokens"})


@dataclass(frozen=True, init=False)
class LedgerState:
    """A read-only snapshot of one ledger: limits (after grants) and usage.

    ``turns_used`` counts turns already charged; while a turn is being
    prepared (notice rendering) the current turn is already included, so
    ``turn_number`` is the 1-based index of the turn in progress.
    """

    limits: Mapping[str, float | None]
    used: Mapping[str, float]
    in_turn: bool = False
    # the turn facts, derived once per snapshot (they are read several times every turn)
    turns_total: int = field(init=False, repr=False, compare=False)
    turns_used: int = field(init=False, repr=False, compare=False)
    turn_number: int = field(init=False, repr=False, compare=False)
    """1-based index of the turn in progress (or of the next turn)."""
    turns_remaining: int = field(init=False, repr=False, compare=False)
    """Turns left, counting the turn in progress."""

    def __init__(
        self, limits: Mapping[str, float | None], used: Mapping[str, float], in_turn: bool = False
    ) -> None:
        total, spent = int(limits["turns"] or 0), int(used["turns"])
        number = spent if in_turn else spent + 1
        # one snapshot per turn: filled in one step (a frozen dataclass's own __init__
        # sets each field through object.__setattr__, twice the cost); still frozen after
        self.__dict__.update(
            limits=limits,
            used=used,
            in_turn=in_turn,
            turns_total=total,
            turns_used=spent,
            turn_number=number,
            turns_remaining=max(0, total - number + 1),
        )

    def remaining(self, dimension: str) -> float | None:
        """Units left in ``dimension`` (``None`` when unlimited); an int for the counts."""
        limit = self.limits[dimension]
        if limit is None:
            return None
        left = limit - self.used[dimension]
        if left > 0:
            return left
        return 0 if dimension in _INTEGRAL_DIMS else 0.0

    @property
    def is_final_turn(self) -> bool:
        """Whether the turn in progress (or the next one) is the last the turn limit allows."""
        return self.turns_remaining == 1

    def in_last_share(self, fraction: float) -> bool:
        """Whether the turns left (counting the one in progress) are within the last
        ``fraction`` of the turn limit, rounded up and never below the final turn:
        ``turns_remaining <= max(1, ceil(fraction * turns_total))``.

        Checked every turn, so without ``ceil`` or ``max``: for a whole number ``n``,
        ``n <= ceil(x)`` exactly when ``n - 1 < x``.
        """
        left = self.turns_remaining
        return left <= 1 or left - 1 < fraction * self.turns_total


class Ledger:
    """Counts usage per dimension against a :class:`Budget`.

    Methods named ``try_*`` check and charge atomically and return the name of
    the refusing dimension (or ``None`` when charged). Every charge is validated
    before anything is counted and then applied to this ledger and every ancestor
    under the tree's one lock, so a charge is all-or-nothing over the whole chain.
    Counts (turns, tool calls, tokens) are ints; ``cost_usd`` is a float. Nothing
    here sleeps, sends or logs.
    """

    __slots__ = (
        "_capped",
        "_chain",
        "_clock",
        "_limits",
        "_lock",
        "_started",
        "_used",
        "accounting",
        "budget",
        "parent",
    )

    def __init__(
        self,
        budget: Budget,
        *,
        parent: Ledger | None = None,
        accounting: AccountingPolicy = DEFAULT_ACCOUNTING,
        clock: Clock = time.monotonic,
    ) -> None:
        if not isinstance(budget, Budget):
            raise ConfigError(f"budget must be a Budget, got {type(budget).__name__}")
        if parent is not None and not isinstance(parent, Ledger):
            raise ConfigError(f"parent must be a Ledger, got {type(parent).__name__}")
        if not isinstance(accounting, AccountingPolicy):
            raise ConfigError(
                f"accounting must be an AccountingPolicy, got {type(accounting).__name__}"
            )
        if not callable(clock):
            raise ConfigError(f"clock must be callable, got {type(clock).__name__}")
        self.budget = budget
        self.parent = parent
        self.accounting = accounting
        self._clock = clock
        self._lock: threading.RLock = parent._lock if parent is not None else threading.RLock()
        self._limits: dict[str, float | None] = budget.limits()
        # whole units stay ints (a result's used["turns"] reads 3, not 3.0)
        self._used: dict[str, float] = {d: 0 if d in _INTEGRAL_DIMS else 0.0 for d in DIMENSIONS}
        self._started = clock()
        # hot path (checked every turn): the ancestor chain never changes, and a grant
        # can raise a limit but never add one, so the limited dimensions are fixed too
        self._chain: tuple[Ledger, ...] = (self, *(parent._chain if parent else ()))
        self._capped: tuple[str, ...] = tuple(d for d in _TOKEN_DIMS if self._limits[d] is not None)

    # -- reading ---------------------------------------------------------------
    def elapsed(self) -> float:
        """Wall-clock seconds since this ledger was created, read from its clock now."""
        return self._clock() - self._started

    def state(self, *, in_turn: bool = False) -> LedgerState:
        """Snapshot of this ledger (wall time read now)."""
        used = self._used.copy()
        used["wall_seconds"] = self.elapsed()
        return LedgerState(self._limits.copy(), used, in_turn)

    def charged_state(self, *, in_turn: bool = False) -> LedgerState:
        """Snapshot as this ledger's last charge left it: here the same as :meth:`state`;
        a stored ledger does not read its store again (the notice of a turn says what
        that turn's atomic charge left, whatever another process charged since)."""
        return self.state(in_turn=in_turn)

    def used(self, dimension: str) -> float:
        """Units of ``dimension`` charged to this ledger so far (wall seconds read now).

        Raises ``KeyError`` for a name that is not a budget dimension.
        """
        return self.elapsed() if dimension == "wall_seconds" else self._used[dimension]

    def limit(self, dimension: str) -> float | None:
        """This ledger's limit on ``dimension`` after grants (``None`` when unlimited).

        Raises ``KeyError`` for a name that is not a budget dimension.
        """
        return self._limits[dimension]

    def chain(self) -> list[Ledger]:
        """This ledger and its ancestors, nearest first."""
        return list(self._chain)

    def wall_left(self) -> float | None:
        """Seconds left of the tightest wall-clock limit up the chain (``None``: no
        ledger of the chain has one): a sub-agent's retries must not wait past its
        caller's deadline either."""
        left: float | None = None
        for node in self._chain:
            lim = node._limits["wall_seconds"]
            if lim is not None:
                rem = max(0.0, lim - node.elapsed())
                left = rem if left is None else min(left, rem)
        return left

    def blocking_dimension(self) -> str | None:
        """The first dimension (here or in an ancestor) that forbids another turn."""
        with self._lock:
            return self._blocking(turns_needed=1)

    # -- charging --------------------------------------------------------------
    def _blocking(self, *, turns_needed: int) -> str | None:
        for node in self._chain:
            lim, used = node._limits, node._used
            t = lim["turns"]
            if t is not None and used["turns"] + turns_needed > t:
                return "turns"
            for dim in node._capped:
                cap = lim[dim]
                if cap is not None and used[dim] >= cap:
                    return dim
            wall = lim["wall_seconds"]
            if wall is not None and node.elapsed() >= wall:
                return "wall_seconds"
        return None

    def try_charge_turn(self, turns: int = 1) -> str | None:
        """Charge ``turns`` turns here and in every ancestor, or refuse all of it.

        Raises:
            ConfigError: ``turns`` is not an int in ``[1, MAX_COUNT]``.
        """
        check_int("turns", turns, minimum=1)
        with self._lock:
            blocked = self._blocking(turns_needed=turns)
            if blocked is None:
                for node in self._chain:
                    node._used["turns"] += turns
            return blocked

    def refund_turn(self, turns: int = 1) -> None:
        """Give back turns charged for a request that produced no response, here and in
        every ancestor: the same number everywhere, at most what each ledger of the chain
        holds, so every count stays the sum of what was charged through it.

        Raises:
            ConfigError: ``turns`` is not an int in ``[1, MAX_COUNT]``.
        """
        check_int("turns", turns, minimum=1)
        with self._lock:
            give = min(turns, *(node._used["turns"] for node in self._chain))
            for node in self._chain:
                node._used["turns"] -= give

    def try_charge_tool_batch(self, names: Sequence[str]) -> str | None:
        """Pre-check and charge a whole tool batch; refuse it whole if it does not fit.

        Raises:
            ConfigError: ``names`` is not a list of tool names.
        """
        check_tool_names("names", names)
        calls = self.accounting.tool_calls_for_batch(names)
        extra_turns = self.accounting.extra_turns_for_batch(names)
        with self._lock:
            for node in self._chain:
                cap = node._limits["tool_calls"]
                if cap is not None and node._used["tool_calls"] + calls > cap:
                    return "tool_calls"
                tcap = node._limits["turns"]
                if extra_turns and tcap is not None and node._used["turns"] + extra_turns > tcap:
                    return "turns"
            for node in self._chain:
                node._used["tool_calls"] += calls
                node._used["turns"] += extra_turns
            return None

    def refund_tool_call(self, name: str) -> None:
        """Give back one tool call (for policies that do not count failures), here and in
        every ancestor; nothing when a ledger of the chain holds none.

        Raises:
            ConfigError: ``name`` is not a str.
        """
        if not isinstance(name, str):
            raise ConfigError(f"name must be a tool name (str), got {type(name).__name__}")
        if name in self.accounting.refunded_tools:
            return
        with self._lock:
            if any(node._used["tool_calls"] < 1 for node in self._chain):
                return
            for node in self._chain:
                node._used["tool_calls"] -= 1

    def add_usage(
        self, *, input_tokens: int = 0, output_tokens: int = 0, cost_usd: float = 0.0
    ) -> None:
        """Record what a response consumed (known only after it arrives), here and in
        every ancestor.

        Raises:
            ConfigError: a token count is not an int in ``[0, MAX_COUNT]`` or ``cost_usd``
                not a finite number in ``[0, MAX_COST_USD]``; the message names it
                (``usage.input_tokens``) and no ledger of the chain is charged.
        """
        check_int("usage.input_tokens", input_tokens)
        check_int("usage.output_tokens", output_tokens)
        # NaN would switch the cost limit off silently; a huge int would overflow a float
        cost = check_number("usage.cost_usd", cost_usd, maximum=MAX_COST_USD)
        with self._lock:
            for node in self._chain:
                u = node._used
                u["input_tokens"] += input_tokens
                u["output_tokens"] += output_tokens
                u["total_tokens"] += input_tokens + output_tokens
                u["cost_usd"] += cost

    def grant(self, **extra: float) -> dict[str, float | None]:
        """Raise limits of this ledger by the given amounts; returns the new limits.

        All or nothing: one bad amount and no limit changes.

        Raises:
            ConfigError: unknown dimension, an amount that is not positive and finite, a
                fractional amount for a count dimension, a dimension that has no limit to
                extend, or a new limit above the dimension's maximum (``MAX_COUNT`` for
                counts); the message names the dimension (``grant.turns``).
        """
        amounts: dict[str, float] = {}
        for dim, amount in extra.items():
            if dim not in DIMENSIONS:
                raise ConfigError(f"grant: unknown dimension {shown(dim)}")
            amounts[dim] = check_limit(f"grant.{dim}", dim, amount)
            if self._limits[dim] is None:
                raise ConfigError(f"grant.{dim}: {dim} has no limit to extend")
        with self._lock:
            raised: dict[str, float] = {}
            for dim, amount in amounts.items():
                current = self._limits[dim]
                assert current is not None
                new = current + amount
                if new > maximum_of(dim):
                    raise ConfigError(
                        f"grant.{dim} would raise the limit to {shown(new)}, "
                        f"above the maximum {shown(maximum_of(dim))}"
                    )
                raised[dim] = new
            self._limits.update(raised)
            return dict(self._limits)

    def counts(self) -> dict[str, float]:
        """Usage of this ledger in every dimension (a copy; wall seconds read now)."""
        used = dict(self._used)
        used["wall_seconds"] = self.elapsed()
        return used

    def limits(self) -> dict[str, float | None]:
        """This ledger's limits in every dimension after grants (a copy; ``None``: unlimited)."""
        return dict(self._limits)


def fixed_clock_ledger(budget: Budget | int) -> Ledger:
    """A ledger whose clock never moves (``budget``: a :class:`Budget`, or a turn count).

    Training rollouts, replays and notice previews use it so that a notice never
    depends on how fast the machine is: wall seconds always read 0.

    Raises:
        ConfigError: ``budget`` is neither a Budget nor a turn count >= 1.
    """
    if isinstance(budget, bool) or not isinstance(budget, (Budget, int)):
        raise ConfigError(f"budget must be a Budget or a turn count, got {type(budget).__name__}")
    return Ledger(budget if isinstance(budget, Budget) else Budget(turns=budget), clock=_zero)


def _zero() -> float:
    return 0.0
