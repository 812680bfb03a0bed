"""A ledger whose numbers live in a :class:`~budgetmix.stores.LedgerStore`.

:class:`StoredLedger` is a :class:`~budgetmix.ledger.Ledger` (the same methods, the same
rule) that checks and charges in the store, over the store keys of its whole parent
chain, in one atomic step: two processes charging one budget cannot overspend it
together, and a new process that opens the same key resumes where the last one stopped
(``controller.episode(episode_id=..., store=...)``). Only ``wall_seconds`` stays each
process's own (measured from when this object was made).

A charge made inside :func:`idempotency_key` carries that key: a request retried with
the same key (after a crash, or by a client) is charged once.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import time
from collections.abc import Iterator, Mapping, Sequence

from budgetmix._validate import check_int, check_number, check_tool_names, shown
from budgetmix.accounting import DEFAULT_ACCOUNTING, AccountingPolicy
from budgetmix.budget import DIMENSIONS, MAX_COST_USD, Budget, check_limit
from budgetmix.exceptions import ConfigError
from budgetmix.ledger import Clock, Ledger, LedgerState
from budgetmix.stores.base import (
    LedgerRecord,
    LedgerStore,
    StoreError,
    check_key,
    is_store,
    refusal,
)

__all__ = ["StoredLedger", "idempotency_key", "new_ledger"]

log = logging.getLogger("budgetmix")
_INTEGRAL = frozenset({"turns", "tool_calls", "input_tokens", "output_tokens", "total_tokens"})
_GATE = ("input_tokens", "output_tokens", "total_tokens", "cost_usd")
_KEY: contextvars.ContextVar[str | None] = contextvars.ContextVar("bm_charge_key", default=None)


@contextlib.contextmanager
def idempotency_key(key: str) -> Iterator[None]:
    """A turn charged inside carries ``key``: once applied, a repeat with the same key
    (in any process using the store) answers "charged" and charges nothing; a refund
    inside gives back that charge once. Tool calls and usage are counted as they come."""
    token = _KEY.set(check_key(key, "idempotency_key"))
    try:
        yield
    finally:
        _KEY.reset(token)


def new_ledger(
    budget: Budget,
    *,
    store: LedgerStore | None,
    key: str,
    parent: Ledger | None = None,
    accounting: AccountingPolicy = DEFAULT_ACCOUNTING,
    clock: Clock = time.monotonic,
) -> Ledger:
    """A plain :class:`Ledger` without a store, else a :class:`StoredLedger` at ``key``."""
    if store is None:
        return Ledger(budget, parent=parent, accounting=accounting, clock=clock)
    return StoredLedger(budget, store=store, key=key, parent=parent, accounting=accounting,
                        clock=clock)  # fmt: skip


class StoredLedger(Ledger):
    """A :class:`Ledger` kept in ``store`` under ``key``; its parent, if any, must be a
    :class:`StoredLedger` of the same store.

    Opening an existing key resumes it: its limits (grants included) and usage are the
    store's, not ``budget``'s.

    Raises:
        ConfigError: ``store`` is not a :class:`LedgerStore`, ``key`` not a store key,
            or the parent is not stored in the same store.
        StoreError: the store could not be reached; nothing was charged.
    """

    __slots__ = ("_keys", "key", "store")
    store: LedgerStore
    key: str
    _keys: tuple[str, ...]

    def __init__(
        self,
        budget: Budget,
        *,
        store: LedgerStore,
        key: str,
        parent: Ledger | None = None,
        accounting: AccountingPolicy = DEFAULT_ACCOUNTING,
        clock: Clock = time.monotonic,
    ) -> None:
        if not is_store(store):
            raise ConfigError(f"store must be a LedgerStore, got {type(store).__name__}")
        if parent is not None and not (isinstance(parent, StoredLedger) and parent.store is store):
            raise ConfigError("parent: a stored ledger's parent must be stored in the same store")
        super().__init__(budget, parent=parent, accounting=accounting, clock=clock)
        self.store = store
        self.key = check_key(key, "episode_id")
        self._keys: tuple[str, ...] = (self.key, *(parent._keys if parent else ()))
        self._take(store.open(self.key, budget.limits()))

    def _take(self, record: LedgerRecord) -> None:
        """This process's copy of the store's numbers (read after every call)."""
        for dim, value in record.used.items():
            self._used[dim] = int(value) if dim in _INTEGRAL else float(value)
        for dim, cap in record.limits.items():
            self._limits[dim] = None if cap is None else (int(cap) if dim in _INTEGRAL else cap)
        self._capped = tuple(d for d in _GATE if self._limits[d] is not None)

    def refresh(self) -> None:
        """Read this ledger's numbers from the store now (another process may charge it).

        Raises:
            StoreError: the store could not be read.
        """
        record = self.store.read(self.key)
        if record is not None:
            self._take(record)

    def _wall_blocked(self) -> bool:
        left = self.wall_left()
        return left is not None and left <= 0

    def _reread(self) -> None:
        """Refresh for a snapshot: with the store down, the numbers of its last answer
        (only a charge must fail closed; a notice or a result may read the last copy)."""
        with contextlib.suppress(StoreError):
            self.refresh()

    # -- reading: the store's numbers ----------------------------------------------------
    def state(self, *, in_turn: bool = False) -> LedgerState:
        """Snapshot of this ledger as the store holds it now (wall time read now; the
        last numbers read when the store cannot be reached)."""
        self._reread()
        return super().state(in_turn=in_turn)

    def charged_state(self, *, in_turn: bool = False) -> LedgerState:
        """See :meth:`Ledger.charged_state`: the numbers of the store's last answer."""
        return super().state(in_turn=in_turn)

    def counts(self) -> dict[str, float]:
        """Usage in every dimension, read from the store (wall seconds read now; the last
        numbers read when the store cannot be reached)."""
        self._reread()
        return super().counts()

    def blocking_dimension(self) -> str | None:
        """The first dimension (here or in an ancestor) that forbids another turn."""
        if self._wall_blocked():
            return "wall_seconds"
        nodes = [self.store.read(k) for k in self._keys]
        return refusal([n for n in nodes if n is not None], {"turns": 1}, _GATE)

    # -- charging: one atomic step in the store ------------------------------------------
    def _charge(self, add: Mapping[str, float], gate: Sequence[str], key: str | None) -> str | None:
        if self._wall_blocked():
            return "wall_seconds"
        refused, record = self.store.charge(self._keys, add, gate, key)
        self._take(record)
        return refused

    def _add(self, amounts: Mapping[str, float], release: str | None = None) -> None:
        """Usage or a refund, which come after the request was charged and sent: with the
        store down they are logged and dropped (a charge is what fails closed; raising
        here would only hide an answer already paid for)."""
        try:
            self._take(self.store.add(self._keys, amounts, release))
        except StoreError as exc:
            log.error("budgetmix: %s; not recorded for ledger %s: %s", exc, self.key, amounts)

    def try_charge_turn(self, turns: int = 1) -> str | None:
        """Charge ``turns`` turns over the chain in the store, or refuse all of it."""
        check_int("turns", turns, minimum=1)
        return self._charge({"turns": turns}, _GATE, _KEY.get())

    def refund_turn(self, turns: int = 1) -> None:
        """Give back turns (at most what every ledger of the chain holds); inside
        :func:`idempotency_key`, only what that key's charge took, once."""
        check_int("turns", turns, minimum=1)
        self._add({"turns": -turns}, _KEY.get())

    def try_charge_tool_batch(self, names: Sequence[str]) -> str | None:
        """Pre-check and charge a whole tool batch over the chain in the store."""
        check_tool_names("names", names)
        add: dict[str, float] = {"tool_calls": self.accounting.tool_calls_for_batch(names)}
        extra = self.accounting.extra_turns_for_batch(names)
        if extra:
            add["turns"] = extra
        return self._charge(add, (), None)

    def refund_tool_call(self, name: str) -> None:
        """Give back one tool call (nothing when a ledger of the chain holds none)."""
        if not isinstance(name, str):
            raise ConfigError(f"name must be a tool name (str), got {type(name).__name__}")
        if name not in self.accounting.refunded_tools:
            self._add({"tool_calls": -1})

    def add_usage(
        self, *, input_tokens: int = 0, output_tokens: int = 0, cost_usd: float = 0.0
    ) -> None:
        """Record what a response consumed, over the chain in the store."""
        check_int("usage.input_tokens", input_tokens)
        check_int("usage.output_tokens", output_tokens)
        cost = check_number("usage.cost_usd", cost_usd, maximum=MAX_COST_USD)
        amounts = {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens,
            "cost_usd": cost,
        }
        self._add({k: v for k, v in amounts.items() if v})

    def grant(self, **extra: float) -> dict[str, float | None]:
        """Raise this ledger's limits in the store; returns the new limits (all or nothing)."""
        amounts: dict[str, float] = {}
        for dim, amount in extra.items():
            if dim not in DIMENSIONS:
                raise ConfigError(f"grant: unknown dimension {shown(dim)}")
            amounts[dim] = check_limit(f"grant.{dim}", dim, amount)
        wall = amounts.pop("wall_seconds", None)
        if wall is not None:  # each process's own: granted here only
            if self._limits["wall_seconds"] is None:
                raise ConfigError("grant.wall_seconds: wall_seconds has no limit to extend")
            self._limits["wall_seconds"] = self._limits["wall_seconds"] + wall
        if amounts:
            self._take(self.store.grant(self.key, amounts))
        return dict(self._limits)
