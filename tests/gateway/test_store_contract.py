"""The three LedgerStores pass one contract: the same answers, across processes too."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from budgetmix import ConfigError
from budgetmix.stores import LedgerStore, MemoryStore, SQLiteStore, StoreError, open_store

LIMITS = {"turns": 3, "tool_calls": 2, "total_tokens": 100, "cost_usd": None}
TURN_GATE = ("input_tokens", "output_tokens", "total_tokens", "cost_usd")


@pytest.fixture(params=["memory", "sqlite", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LedgerStore]:
    if request.param == "memory":
        made: LedgerStore = MemoryStore()
    elif request.param == "sqlite":
        made = SQLiteStore(tmp_path / "ledgers.db")
    else:
        server = request.getfixturevalue("redis_server")
        from budgetmix.stores.redis import RedisStore

        made = RedisStore(server.url, prefix=f"t{time.monotonic_ns()}:")
    yield made
    made.close()


def test_open_creates_once_and_keeps_what_a_record_holds(store: LedgerStore) -> None:
    first = store.open("a", LIMITS)
    assert first.limits["turns"] == 3 and first.limits["cost_usd"] is None
    assert first.used["turns"] == 0
    store.charge(["a"], {"turns": 1})
    again = store.open("a", {"turns": 50})  # an existing record keeps its own limits
    assert again.limits["turns"] == 3 and again.used["turns"] == 1
    assert store.read("missing") is None


def test_charge_is_checked_and_applied_over_the_whole_chain(store: LedgerStore) -> None:
    store.open("parent", {"turns": 2})
    store.open("child", {"turns": 5})
    assert store.charge(["child", "parent"], {"turns": 1}, TURN_GATE)[0] is None
    assert store.charge(["child", "parent"], {"turns": 1}, TURN_GATE)[0] is None
    refused, child = store.charge(["child", "parent"], {"turns": 1}, TURN_GATE)
    assert refused == "turns"  # the parent's limit binds the child
    assert child.used["turns"] == 2  # all or nothing: the child was not charged either
    parent = store.read("parent")
    assert parent is not None and parent.used["turns"] == 2


def test_spent_tokens_refuse_the_next_turn(store: LedgerStore) -> None:
    store.open("a", LIMITS)
    store.add(["a"], {"input_tokens": 60, "output_tokens": 40, "total_tokens": 100})
    assert store.charge(["a"], {"turns": 1}, TURN_GATE)[0] == "total_tokens"
    assert store.charge(["a"], {"tool_calls": 2})[0] is None  # no gate: counts only
    assert store.charge(["a"], {"tool_calls": 1})[0] == "tool_calls"


def test_an_idempotency_key_charges_once_and_a_release_gives_it_back_once(
    store: LedgerStore,
) -> None:
    store.open("a", LIMITS)
    assert store.charge(["a"], {"turns": 1}, TURN_GATE, "req-1")[0] is None
    refused, rec = store.charge(["a"], {"turns": 1}, TURN_GATE, "req-1")  # a retry
    assert refused is None and rec.used["turns"] == 1
    assert store.add(["a"], {"turns": -1}, release="req-1").used["turns"] == 0
    assert store.add(["a"], {"turns": -1}, release="req-1").used["turns"] == 0  # once
    assert store.charge(["a"], {"turns": 1}, TURN_GATE, "req-1")[1].used["turns"] == 1


def test_a_refused_charge_is_not_remembered(store: LedgerStore) -> None:
    store.open("a", {"turns": 1})
    store.charge(["a"], {"turns": 1})
    assert store.charge(["a"], {"turns": 1}, (), "req-2")[0] == "turns"
    store.grant("a", {"turns": 1})
    assert store.charge(["a"], {"turns": 1}, (), "req-2")[0] is None  # checked again
    assert store.read("a").used["turns"] == 2  # type: ignore[union-attr]


def test_a_refund_gives_back_at_most_what_every_record_holds(store: LedgerStore) -> None:
    store.open("p", {"tool_calls": 10})
    store.open("c", {"tool_calls": 10})
    store.charge(["p"], {"tool_calls": 2})
    store.charge(["c", "p"], {"tool_calls": 1})
    rec = store.add(["c", "p"], {"tool_calls": -3})
    assert rec.used["tool_calls"] == 0
    assert store.read("p").used["tool_calls"] == 2  # type: ignore[union-attr]


def test_grant_raises_a_limit_all_or_nothing(store: LedgerStore) -> None:
    store.open("a", LIMITS)
    assert store.grant("a", {"turns": 2}).limits["turns"] == 5
    with pytest.raises(ConfigError, match=r"grant\.cost_usd"):
        store.grant("a", {"turns": 1, "cost_usd": 1.0})
    with pytest.raises(ConfigError, match=r"grant\.turns"):
        store.grant("a", {"turns": 2**60})
    assert store.read("a").limits["turns"] == 5  # type: ignore[union-attr]


def test_a_chain_naming_an_unopened_ledger_is_a_store_error(store: LedgerStore) -> None:
    store.open("a", LIMITS)
    with pytest.raises(StoreError, match="nope"):
        store.charge(["a", "nope"], {"turns": 1})
    assert store.read("a").used["turns"] == 0  # type: ignore[union-attr]


def test_usage_is_added_over_the_whole_chain_or_not_at_all(store: LedgerStore) -> None:
    store.open("c", LIMITS)
    store.open("p", LIMITS)
    rec = store.add(["c", "p"], {"input_tokens": 7, "output_tokens": 3, "total_tokens": 10})
    assert (rec.used["input_tokens"], rec.used["total_tokens"]) == (7, 10)
    assert store.read("p").used["total_tokens"] == 10  # type: ignore[union-attr]
    with pytest.raises(StoreError, match="nope"):
        store.add(["c", "nope"], {"total_tokens": 5})
    assert store.read("c").used["total_tokens"] == 10  # type: ignore[union-attr]
    # fractional costs add exactly as Python adds them
    store.add(["c"], {"cost_usd": 0.1})
    assert store.add(["c"], {"cost_usd": 0.2}).used["cost_usd"] == 0.1 + 0.2
    assert store.add(["c"], {"total_tokens": 1}).used["cost_usd"] == 0.1 + 0.2


def test_links_expire(store: LedgerStore) -> None:
    store.link("resp_1", "conv-a", 60)
    store.link("resp_2", "conv-b", 0.001)
    time.sleep(0.01)
    assert store.lookup("resp_1") == "conv-a"
    assert store.lookup("resp_2") is None and store.lookup("resp_3") is None


def test_open_store_reads_urls(tmp_path: Path) -> None:
    assert isinstance(open_store("memory://"), MemoryStore)
    assert isinstance(open_store(f"sqlite://{tmp_path}/x.db"), SQLiteStore)
    with pytest.raises(ConfigError, match="store: unknown URL"):
        open_store("postgres://x")


_WORKER = """
import json, sys
from budgetmix.stores import open_store
store = open_store(sys.argv[1])
won = sum(store.charge(["conv", "tenant"], {"turns": 1}, (), f"{sys.argv[2]}-{i}")[0] is None
          for i in range(int(sys.argv[3])))
store.charge(["conv", "tenant"], {"turns": 1}, (), f"{sys.argv[2]}-0")  # a retry: not charged
print(json.dumps(won))
"""


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_processes_charging_one_budget_never_overspend_it(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    import subprocess
    import sys

    if kind == "sqlite":
        url = f"sqlite://{tmp_path}/shared.db"
    else:
        url = request.getfixturevalue("redis_server").url.replace("/0", "/1")
    store = open_store(url)
    store.open("tenant", {"turns": 150})
    store.open("conv", {"turns": 1000})
    procs = [
        subprocess.Popen([sys.executable, "-c", _WORKER, url, f"w{i}", "60"],
                         stdout=subprocess.PIPE, text=True)
        for i in range(4)
    ]
    won = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sum(won) == 150  # 240 tries, 150 charged: not one over, not one lost
    assert store.read("tenant").used["turns"] == 150  # type: ignore[union-attr]
    assert store.read("conv").used["turns"] == 150  # type: ignore[union-attr]
    if kind == "redis":
        store._client.flushdb()  # type: ignore[attr-defined]
    store.close()
