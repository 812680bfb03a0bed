"""Budgets that outlive a process: the :class:`LedgerStore` protocol and its stores.

* :class:`MemoryStore`: this process's memory (tests, one process);
* :class:`SQLiteStore`: one file, durable, shared by the processes of one machine (the
  gateway's default);
* :class:`RedisStore`: one Redis server shared by a fleet (the ``redis`` extra).

``controller.episode(episode_id="job-42", store=SQLiteStore("budgets.db"))`` keeps the
episode's ledger in the store: a new process that opens the same id resumes its budget
(the same turns left, the same notice). :func:`open_store` reads a store URL
(``memory://``, ``sqlite:///path/to.db``, ``redis://host:6379/0``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from budgetmix.exceptions import ConfigError
from budgetmix.stores.base import LedgerRecord, LedgerStore, StoreError, is_store, refusal
from budgetmix.stores.ledger import StoredLedger, idempotency_key, new_ledger
from budgetmix.stores.memory import MemoryStore
from budgetmix.stores.sqlite import SQLiteStore

if TYPE_CHECKING:
    from budgetmix.stores.redis import RedisStore

__all__ = [
    "LedgerRecord",
    "LedgerStore",
    "MemoryStore",
    "RedisStore",
    "SQLiteStore",
    "StoreError",
    "StoredLedger",
    "idempotency_key",
    "is_store",
    "new_ledger",
    "open_store",
    "refusal",
]


def __getattr__(name: str) -> Any:
    if name == "RedisStore":  # imports nothing of redis until a store is made
        from budgetmix.stores.redis import RedisStore

        return RedisStore
    raise AttributeError(name)


def open_store(url: str) -> LedgerStore:
    """The store a URL names: ``memory://``, ``sqlite:///abs/path.db`` (or
    ``sqlite://rel/path.db``), ``redis://host:port/db`` / ``rediss://...``.

    Raises:
        ConfigError: an unknown scheme (the message names ``store``).
        StoreError: the store cannot be opened.
        MissingExtraError: a Redis URL without the ``redis`` extra.
    """
    if not isinstance(url, str):
        raise ConfigError(f"store: expected a URL string, got {type(url).__name__}")
    if url == "memory://":
        return MemoryStore()
    if url.startswith("sqlite://"):
        path = url[len("sqlite://") :]
        if not path:
            raise ConfigError("store: sqlite:// needs a path (sqlite:///var/budgets.db)")
        return SQLiteStore(path)
    if url.startswith(("redis://", "rediss://", "unix://")):
        from budgetmix.stores.redis import RedisStore

        return RedisStore(url)
    raise ConfigError(
        f"store: unknown URL {url!r}; expected memory://, sqlite:///path or redis://host:port"
    )
