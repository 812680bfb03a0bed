"""Durable episodes: a new process resumes a stored episode's budget after kill -9."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from budgetmix import Budget, BudgetController
from budgetmix.stores import MemoryStore, SQLiteStore, StoredLedger, idempotency_key

_STEP = """
import json, os, signal, sys
from budgetmix import Budget, BudgetController
from budgetmix.stores import SQLiteStore, idempotency_key
path, request, die = sys.argv[1], sys.argv[2], sys.argv[3]
controller = BudgetController(Budget(turns=4, total_tokens=1000))
with controller.episode(episode_id="job-42", store=SQLiteStore(path)) as ep:
    with idempotency_key(request):
        turn = ep.try_begin_turn()
    print(json.dumps({"notice": turn and turn.notice, "used": ep.state.used["turns"]}), flush=True)
    if die == "mid-turn":  # the response is streaming: killed before its usage arrives
        os.kill(os.getpid(), signal.SIGKILL)
    turn.usage(input_tokens=10, output_tokens=5)
    turn.end()
    if die == "between-turns":
        os.kill(os.getpid(), signal.SIGKILL)
"""


def _step(path: Path, request: str, die: str) -> tuple[dict[str, object], int]:
    proc = subprocess.run([sys.executable, "-c", _STEP, str(path), request, die],
                          capture_output=True, text=True, timeout=120, check=False)
    return json.loads(proc.stdout.splitlines()[0]), proc.returncode


def test_a_killed_process_resumes_with_the_same_budget_notice_and_no_double_charge(
    tmp_path: Path,
) -> None:
    db = tmp_path / "episodes.db"
    first, code = _step(db, "req-1", "between-turns")
    assert code == -signal.SIGKILL
    assert first["notice"] == (
        "Budget (v1): turn 1 of 4, 4 turns left including this one. Tokens: 0 of 1000 used."
    )
    second, code = _step(db, "req-2", "mid-turn")
    assert code == -signal.SIGKILL
    assert second["notice"] == (  # the same turns left and tokens as before the kill
        "Budget (v1): turn 2 of 4, 3 turns left including this one. Tokens: 15 of 1000 used."
    )
    # the killed request is retried with its key: charged once, the same notice again
    retried, code = _step(db, "req-2", "none")
    assert code == 0 and retried == second
    last, _ = _step(db, "req-3", "none")
    assert last["notice"] == (
        "Budget (v1): turn 3 of 4, 2 turns left including this one. Tokens: 30 of 1000 used."
    )
    record = SQLiteStore(db).read("job-42")
    assert record is not None
    assert record.used["turns"] == 3
    assert record.used["total_tokens"] == 45  # turns 1, 2 (retried) and 3; the killed one's lost


def test_a_stored_episode_resumes_grants_and_refuses_at_the_limit() -> None:
    store = MemoryStore()
    controller = BudgetController(Budget(turns=1))
    with controller.episode(episode_id="e", store=store) as ep:
        ep.begin_turn()
        ep.grant(turns=1)
    again = controller.episode(episode_id="e", store=store)
    with again:
        assert again.state.turns_total == 2  # the grant lives in the store
        again.begin_turn()
        assert again.try_begin_turn() is None
    assert again.result is not None and again.result.status == "budget_exhausted"


def test_a_child_of_a_stored_episode_draws_from_it_in_the_store() -> None:
    store = MemoryStore()
    controller = BudgetController(Budget(turns=2))
    with controller.episode(episode_id="parent", store=store) as parent:
        child = parent.child(Budget(turns=5))
        assert isinstance(child.ledger, StoredLedger) and child.ledger.store is store
        with child:
            child.begin_turn()
            child.begin_turn()
            assert child.try_begin_turn() is None  # the parent's two turns bind
    assert store.read("parent").used["turns"] == 2  # type: ignore[union-attr]


def test_a_refunded_turn_inside_a_key_may_be_charged_again() -> None:
    store = MemoryStore()
    controller = BudgetController(Budget(turns=3))
    with controller.episode(episode_id="r", store=store) as ep, idempotency_key("k"):
        ep.ledger.try_charge_turn()
        ep.ledger.refund_turn()
        ep.ledger.refund_turn()  # once only
        assert ep.ledger.try_charge_turn() is None
    assert store.read("r").used["turns"] == 1  # type: ignore[union-attr]


def test_a_bad_store_is_named() -> None:
    controller = BudgetController(Budget(turns=3))
    with pytest.raises(Exception, match="store must be a LedgerStore"):
        controller.episode(store=object())  # type: ignore[arg-type]


class _Racing(MemoryStore):
    """A store where another process charges the same ledger right after each charge."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def read(self, key: str) -> object:  # type: ignore[override]
        self.reads += 1
        return super().read(key)

    def charge(self, chain, add, gate=(), idempotency_key=None):  # type: ignore[no-untyped-def,override]
        answer = super().charge(chain, add, gate, idempotency_key)
        super().charge(chain, {"turns": 1}, gate)  # the other process's turn, in between
        return answer


def test_a_turns_notice_says_what_its_own_charge_left_without_reading_the_store_again() -> None:
    store = _Racing()
    controller = BudgetController(Budget(turns=6))
    with controller.episode(episode_id="job-7", store=store) as ep:
        reads = store.reads
        turn = ep.begin_turn()
        assert store.reads == reads  # no read between the charge and the notice
        # turn 1 as this charge left it (a reread would number it 2, after the other's)
        assert turn.notice == "Budget (v1): turn 1 of 6, 6 turns left including this one."
        turn.end()
        assert ep.state.used["turns"] == 2  # a snapshot reads the store: both turns
        turn = ep.begin_turn()
        assert turn.notice == "Budget (v1): turn 3 of 6, 4 turns left including this one."
