"""Where a ledger's numbers live: the :class:`LedgerStore` protocol and its one rule.

A store holds, per ledger key, the limits (after grants) and the usage of every budget
dimension but ``wall_seconds`` (a wall clock is each process's own). A charge names the
chain of keys it goes through (the ledger first, then its ancestors) and is checked and
applied to all of them in one atomic step, or refused whole: :func:`refusal` is the one
rule, which the Redis store's server-side script mirrors. A charge may carry an
idempotency key: the first charge with that key that is applied is remembered (a day);
a repeat answers "charged" without charging again (a retried request is never charged
twice).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from budgetmix.budget import DIMENSIONS, maximum_of
from budgetmix.exceptions import BudgetmixError, ConfigError

__all__ = [
    "STORED_DIMENSIONS",
    "LedgerRecord",
    "LedgerStore",
    "StoreError",
    "apply_add",
    "check_key",
    "granted",
    "is_store",
    "refusal",
]

#: The dimensions a store keeps (``wall_seconds`` is measured by each process).
STORED_DIMENSIONS: tuple[str, ...] = tuple(d for d in DIMENSIONS if d != "wall_seconds")
#: Idempotency records are kept this long (seconds) by the stores that expire them.
IDEMPOTENCY_TTL = 86_400
MAX_KEY_CHARS = 512


class StoreError(BudgetmixError):
    """The store could not be read or written (down, locked past its timeout, corrupt).

    Nothing was charged by the call that raised it. A gateway fails closed on it unless
    ``fail_open`` is set.
    """


@dataclass(frozen=True, slots=True)
class LedgerRecord:
    """One ledger's numbers in a store: ``limits`` (``None``: unlimited) and ``used``."""

    limits: Mapping[str, float | None]
    used: Mapping[str, float]


@runtime_checkable
class LedgerStore(Protocol):
    """Where ledgers' numbers live; every method is atomic and may raise :class:`StoreError`.

    Keys are opaque strings (1-512 characters); ``chain`` is a ledger key and then its
    ancestors' keys, nearest first.
    """

    def open(self, key: str, limits: Mapping[str, float | None]) -> LedgerRecord:
        """The record of ``key``, created with ``limits`` and nothing used if absent (an
        existing record keeps its own limits: grants and usage survive a restart)."""
        ...

    def read(self, key: str) -> LedgerRecord | None:
        """The record of ``key``, or ``None`` when there is none."""
        ...

    def charge(
        self,
        chain: Sequence[str],
        add: Mapping[str, float],
        gate: Sequence[str] = (),
        idempotency_key: str | None = None,
    ) -> tuple[str | None, LedgerRecord]:
        """Check :func:`refusal` over ``chain`` and, when nothing refuses, add ``add``
        to every record of it; the refusing dimension (``None``: charged) and the first
        record as it is now. A charge applied with ``idempotency_key`` is remembered: a
        repeat answers ``None`` (charged) and charges nothing (a refusal is not
        remembered: a repeat is checked again)."""
        ...

    def add(
        self, chain: Sequence[str], amounts: Mapping[str, float], release: str | None = None
    ) -> LedgerRecord:
        """Add ``amounts`` to every record of ``chain`` unchecked (usage known after a
        response); a negative amount gives back at most what every record holds
        (:func:`apply_add`). With ``release`` (a charge's idempotency key) the amounts
        give that charge back: applied only while the charge is remembered, which it
        then forgets (a refund repeated gives nothing back; the key may charge again)."""
        ...

    def grant(self, key: str, extra: Mapping[str, float]) -> LedgerRecord:
        """Raise ``key``'s limits by ``extra`` (each dimension must have a limit).

        Raises:
            ConfigError: a dimension without a limit, or a new limit over its maximum;
                nothing changes.
        """
        ...

    def link(self, name: str, value: str, ttl_seconds: float) -> None:
        """Keep ``value`` under ``name`` for ``ttl_seconds`` (a response id's conversation)."""
        ...

    def lookup(self, name: str) -> str | None:
        """The value linked under ``name``, if still kept."""
        ...

    def close(self) -> None:
        """Release connections (the numbers stay where they are)."""
        ...


_STORE_TYPES: set[type] = set()


def is_store(value: object) -> bool:
    """Whether ``value`` is a :class:`LedgerStore` (checked once per type: a protocol's
    ``isinstance`` walks its members, about 0.2 ms)."""
    kind = type(value)
    if kind in _STORE_TYPES:
        return True
    if isinstance(value, LedgerStore):
        _STORE_TYPES.add(kind)
        return True
    return False


def check_key(key: object, field: str = "key") -> str:
    """``key`` when it is a store key (a str of 1 to 512 characters).

    Raises:
        ConfigError: it is not; the message names ``field``.
    """
    if not isinstance(key, str) or not 0 < len(key) <= MAX_KEY_CHARS:
        raise ConfigError(f"{field}: expected a str of 1 to {MAX_KEY_CHARS} characters")
    return key


def refusal(
    nodes: Sequence[LedgerRecord], add: Mapping[str, float], gate: Sequence[str]
) -> str | None:
    """The dimension refusing a charge over ``nodes`` (nearest first), or ``None``.

    Per record, in order: a dimension of ``add`` with a positive amount refuses when
    ``used + amount > limit``; a ``gate`` dimension refuses when ``used >= limit``
    (tokens and cost are known only after a response: a turn is refused once they are
    spent). The same rule as :class:`~budgetmix.ledger.Ledger`'s.
    """
    for node in nodes:
        limits, used = node.limits, node.used
        for dim, amount in add.items():
            cap = limits.get(dim)
            if amount > 0 and cap is not None and used.get(dim, 0) + amount > cap:
                return dim
        for dim in gate:
            cap = limits.get(dim)
            if cap is not None and used.get(dim, 0) >= cap:
                return dim
    return None


def apply_add(used: Sequence[dict[str, float]], amounts: Mapping[str, float]) -> None:
    """Add ``amounts`` to each of ``used`` in place; a negative amount gives back
    ``min(-amount, smallest count of the chain)``, the same everywhere, so every count
    stays the sum of what was charged through it."""
    for dim, amount in amounts.items():
        if amount < 0:
            amount = -min(-amount, *(u.get(dim, 0) for u in used))
        if amount:
            for u in used:
                u[dim] = u.get(dim, 0) + amount


def granted(limits: Mapping[str, float | None], extra: Mapping[str, float]) -> dict[str, float]:
    """The new limits ``extra`` makes of ``limits`` (only the raised dimensions).

    Raises:
        ConfigError: a dimension without a limit or a new limit over its maximum.
    """
    raised: dict[str, float] = {}
    for dim, amount in extra.items():
        current = limits.get(dim)
        if current is None:
            raise ConfigError(f"grant.{dim}: {dim} has no limit to extend")
        new = current + amount
        if new > maximum_of(dim):
            raise ConfigError(f"grant.{dim} would raise the limit above {maximum_of(dim)}")
        raised[dim] = new
    return raised
