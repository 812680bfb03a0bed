"""The in-memory store: one process's dicts under one lock (tests, one-process gateways).

Its numbers end with the process; :class:`~budgetmix.stores.SQLiteStore` keeps them.
A plain :class:`~budgetmix.ledger.Ledger` (no store) is the same rule without the
protocol's indirection, and stays the default in-process.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence

from budgetmix.stores.base import (
    STORED_DIMENSIONS,
    LedgerRecord,
    StoreError,
    apply_add,
    check_key,
    granted,
    refusal,
)

__all__ = ["MemoryStore"]


class MemoryStore:
    """A :class:`~budgetmix.stores.LedgerStore` in this process's memory."""

    def __init__(self) -> None:
        self._limits: dict[str, dict[str, float | None]] = {}
        self._used: dict[str, dict[str, float]] = {}
        self._done: set[str] = set()  # idempotency keys of the charges applied
        self._links: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def _record(self, key: str) -> LedgerRecord:
        return LedgerRecord(dict(self._limits[key]), dict(self._used[key]))

    def _known(self, chain: Sequence[str]) -> list[str]:
        keys = [check_key(k, "chain") for k in chain]
        missing = [k for k in keys if k not in self._limits]
        if missing:
            raise StoreError(f"no ledger {missing[0]!r} in the store (open it first)")
        return keys

    def open(self, key: str, limits: Mapping[str, float | None]) -> LedgerRecord:
        """See :meth:`LedgerStore.open`."""
        check_key(key)
        with self._lock:
            if key not in self._limits:
                self._limits[key] = {d: limits.get(d) for d in STORED_DIMENSIONS}
                self._used[key] = dict.fromkeys(STORED_DIMENSIONS, 0.0)
            return self._record(key)

    def read(self, key: str) -> LedgerRecord | None:
        """See :meth:`LedgerStore.read`."""
        with self._lock:
            return self._record(key) if key in self._limits else None

    def charge(
        self,
        chain: Sequence[str],
        add: Mapping[str, float],
        gate: Sequence[str] = (),
        idempotency_key: str | None = None,
    ) -> tuple[str | None, LedgerRecord]:
        """See :meth:`LedgerStore.charge`."""
        with self._lock:
            keys = self._known(chain)
            if idempotency_key is not None and idempotency_key in self._done:
                return None, self._record(keys[0])
            nodes = [LedgerRecord(self._limits[k], self._used[k]) for k in keys]
            refused = refusal(nodes, add, gate)
            if refused is None:
                apply_add([self._used[k] for k in keys], add)
                if idempotency_key is not None:
                    self._done.add(idempotency_key)
            return refused, self._record(keys[0])

    def add(
        self, chain: Sequence[str], amounts: Mapping[str, float], release: str | None = None
    ) -> LedgerRecord:
        """See :meth:`LedgerStore.add`."""
        with self._lock:
            keys = self._known(chain)
            if release is None or release in self._done:
                self._done.discard(release or "")
                apply_add([self._used[k] for k in keys], amounts)
            return self._record(keys[0])

    def grant(self, key: str, extra: Mapping[str, float]) -> LedgerRecord:
        """See :meth:`LedgerStore.grant`."""
        with self._lock:
            (key,) = self._known([key])
            self._limits[key].update(granted(self._limits[key], extra))
            return self._record(key)

    def link(self, name: str, value: str, ttl_seconds: float) -> None:
        """See :meth:`LedgerStore.link`."""
        with self._lock:
            self._links[check_key(name, "name")] = (value, time.time() + ttl_seconds)

    def lookup(self, name: str) -> str | None:
        """See :meth:`LedgerStore.lookup`."""
        with self._lock:
            found = self._links.get(name)
        return found[0] if found is not None and found[1] > time.time() else None

    def close(self) -> None:
        """Nothing to release."""
