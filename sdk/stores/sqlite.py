"""The SQLite store: embedded and durable, shared by the processes of one machine.

One file (stdlib :mod:`sqlite3`) in WAL mode, so readers never wait for the writer.
Every charge is one ``BEGIN IMMEDIATE`` transaction: it takes the write lock before it
reads, so the check and the charge over the whole chain are one step for every process
using the file (a process killed halfway leaves nothing half-applied: SQLite rolls the
transaction back). ``synchronous=NORMAL``: a committed charge survives the process being
killed; an operating-system crash may lose the last few.
"""

from __future__ import annotations

import json
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from budgetmix.stores.base import (
    IDEMPOTENCY_TTL,
    STORED_DIMENSIONS,
    LedgerRecord,
    StoreError,
    apply_add,
    check_key,
    granted,
    refusal,
)

__all__ = ["SQLiteStore"]

T = TypeVar("T")

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS ledgers (key TEXT PRIMARY KEY, limits TEXT NOT NULL, "
    "used TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS charges (key TEXT PRIMARY KEY, at REAL NOT NULL)",
    "CREATE TABLE IF NOT EXISTS links (name TEXT PRIMARY KEY, value TEXT NOT NULL, "
    "expires REAL NOT NULL)",
)


class SQLiteStore:
    """A :class:`~budgetmix.stores.LedgerStore` in one SQLite file.

    Args:
        path: the database file (created with its folder); ``":memory:"`` for a
            private, non-durable one.
        timeout: seconds a charge waits for another process's transaction.

    Raises:
        StoreError: the file cannot be opened as a database.
    """

    def __init__(self, path: str | Path, *, timeout: float = 30.0) -> None:
        self.path = str(path)
        self.timeout = timeout
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(
                self.path, timeout=timeout, isolation_level=None, check_same_thread=False
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            for statement in _SCHEMA:
                self._db.execute(statement)
            self._db.execute("PRAGMA busy_timeout=0")  # from here the waits are _spin's
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite store {self.path}: {exc}") from exc
        self._charges = 0

    # -- one transaction ---------------------------------------------------------------
    def _spin(self, call: Callable[[], T]) -> T:
        """``call()``, retried every few hundred microseconds while another process holds
        the lock it needs (SQLite's own busy handler backs off to 100 ms sleeps, far
        longer than a charge holds the lock), until ``timeout``."""
        deadline = time.monotonic() + self.timeout
        pause = 0.0002
        while True:
            try:
                return call()
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                if time.monotonic() > deadline:
                    raise
            time.sleep(pause * (0.5 + random.random()))
            pause = min(pause * 1.5, 0.005)

    def _write(self, body: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``body`` in one ``BEGIN IMMEDIATE`` transaction (rolled back on error)."""
        with self._lock:
            db = self._db
            try:
                self._spin(lambda: db.execute("BEGIN IMMEDIATE"))
                try:
                    out = body(db)
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
                db.execute("COMMIT")
                return out
            except sqlite3.Error as exc:
                raise StoreError(f"sqlite store {self.path}: {exc}") from exc

    @staticmethod
    def _load(db: sqlite3.Connection, keys: Sequence[str]) -> list[LedgerRecord]:
        out: list[LedgerRecord] = []
        for key in keys:
            row = db.execute("SELECT limits, used FROM ledgers WHERE key = ?", (key,)).fetchone()
            if row is None:
                raise StoreError(f"no ledger {key!r} in the store (open it first)")
            out.append(LedgerRecord(json.loads(row[0]), json.loads(row[1])))
        return out

    @staticmethod
    def _apply(
        db: sqlite3.Connection,
        keys: Sequence[str],
        nodes: list[LedgerRecord],
        amounts: Mapping[str, float],
    ) -> list[LedgerRecord]:
        used = [dict(n.used) for n in nodes]
        apply_add(used, amounts)
        for key, u in zip(keys, used, strict=True):
            db.execute("UPDATE ledgers SET used = ? WHERE key = ?", (json.dumps(u), key))
        return [LedgerRecord(n.limits, u) for n, u in zip(nodes, used, strict=True)]

    @staticmethod
    def _seen(db: sqlite3.Connection, idem: str | None) -> bool:
        if idem is None:
            return False
        return db.execute("SELECT 1 FROM charges WHERE key = ?", (idem,)).fetchone() is not None

    def _remember(self, db: sqlite3.Connection, idem: str | None) -> None:
        if idem is None:
            return
        now = time.time()
        db.execute("INSERT INTO charges (key, at) VALUES (?, ?)", (idem, now))
        self._charges += 1
        if self._charges % 1000 == 0:  # now and then: forget keys older than a day
            db.execute("DELETE FROM charges WHERE at < ?", (now - IDEMPOTENCY_TTL,))

    # -- the protocol ------------------------------------------------------------------
    def open(self, key: str, limits: Mapping[str, float | None]) -> LedgerRecord:
        """See :meth:`LedgerStore.open`."""
        found = self.read(check_key(key))  # no write lock for a ledger that exists
        if found is not None:
            return found
        fresh = json.dumps({d: limits.get(d) for d in STORED_DIMENSIONS})
        zero = json.dumps(dict.fromkeys(STORED_DIMENSIONS, 0))

        def body(db: sqlite3.Connection) -> LedgerRecord:
            db.execute(
                "INSERT OR IGNORE INTO ledgers (key, limits, used) VALUES (?, ?, ?)",
                (key, fresh, zero),
            )
            return self._load(db, [key])[0]

        return self._write(body)

    def read(self, key: str) -> LedgerRecord | None:
        """See :meth:`LedgerStore.read`."""
        with self._lock:
            try:
                row = self._spin(
                    lambda: self._db.execute(
                        "SELECT limits, used FROM ledgers WHERE key = ?", (key,)
                    ).fetchone()
                )
            except sqlite3.Error as exc:
                raise StoreError(f"sqlite store {self.path}: {exc}") from exc
        return None if row is None else LedgerRecord(json.loads(row[0]), json.loads(row[1]))

    def charge(
        self,
        chain: Sequence[str],
        add: Mapping[str, float],
        gate: Sequence[str] = (),
        idempotency_key: str | None = None,
    ) -> tuple[str | None, LedgerRecord]:
        """See :meth:`LedgerStore.charge`."""
        keys = [check_key(k, "chain") for k in chain]

        def body(db: sqlite3.Connection) -> tuple[str | None, LedgerRecord]:
            nodes = self._load(db, keys)
            if self._seen(db, idempotency_key):
                return None, nodes[0]
            refused = refusal(nodes, add, gate)
            if refused is None:
                nodes = self._apply(db, keys, nodes, add)
                self._remember(db, idempotency_key)
            return refused, nodes[0]

        return self._write(body)

    def add(
        self, chain: Sequence[str], amounts: Mapping[str, float], release: str | None = None
    ) -> LedgerRecord:
        """See :meth:`LedgerStore.add`."""
        keys = [check_key(k, "chain") for k in chain]

        def body(db: sqlite3.Connection) -> LedgerRecord:
            nodes = self._load(db, keys)
            if release is not None:
                gone = db.execute("DELETE FROM charges WHERE key = ?", (release,)).rowcount
                if not gone:
                    return nodes[0]
            return self._apply(db, keys, nodes, amounts)[0]

        return self._write(body)

    def grant(self, key: str, extra: Mapping[str, float]) -> LedgerRecord:
        """See :meth:`LedgerStore.grant`."""

        def body(db: sqlite3.Connection) -> LedgerRecord:
            (node,) = self._load(db, [key])
            limits = {**node.limits, **granted(node.limits, extra)}
            db.execute("UPDATE ledgers SET limits = ? WHERE key = ?", (json.dumps(limits), key))
            return LedgerRecord(limits, node.used)

        return self._write(body)

    def link(self, name: str, value: str, ttl_seconds: float) -> None:
        """See :meth:`LedgerStore.link`."""
        check_key(name, "name")

        def body(db: sqlite3.Connection) -> None:
            db.execute(
                "INSERT OR REPLACE INTO links (name, value, expires) VALUES (?, ?, ?)",
                (name, value, time.time() + ttl_seconds),
            )

        self._write(body)

    def lookup(self, name: str) -> str | None:
        """See :meth:`LedgerStore.lookup`."""
        with self._lock:
            try:
                row = self._spin(
                    lambda: self._db.execute(
                        "SELECT value FROM links WHERE name = ? AND expires > ?",
                        (name, time.time()),
                    ).fetchone()
                )
            except sqlite3.Error as exc:
                raise StoreError(f"sqlite store {self.path}: {exc}") from exc
        return None if row is None else str(row[0])

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._db.close()
