"""Mistakes, recoveries and hooks: taxonomy, ids, turns, call ids, the on_* grammar."""

from __future__ import annotations

import json
from typing import Any

import pytest
from _sdk_doubles import FakeClock
from budgetmix import (
    Budget,
    BudgetController,
    EpisodeStatus,
    Hooks,
    Mistake,
    MistakeKind,
    ProviderError,
    Recovery,
    RetryPolicy,
    StepRecord,
)

TAXONOMY = {
    "tool_error",
    "invalid_tool_arguments",
    "unknown_tool",
    "env_action_failed",
    "model_format_error",
    "provider_error",
}


class Recorder(Hooks):
    """Records every hook call as (method, payload)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def on_turn(self, episode: Any, turn: int) -> None:
        self.calls.append(("on_turn", turn))

    def on_tool_result(self, episode: Any, call: Any) -> None:
        self.calls.append(("on_tool_result", (call.name, call.ok)))

    def on_mistake(self, episode: Any, mistake: Mistake) -> None:
        self.calls.append(("on_mistake", mistake.id))

    def on_recovery(self, episode: Any, recovery: Recovery) -> None:
        self.calls.append(("on_recovery", recovery.id))

    def on_budget_warning(self, episode: Any, state: Any) -> None:
        self.calls.append(("on_budget_warning", state.turns_remaining))

    def on_exhausted(self, episode: Any, dimension: str) -> None:
        self.calls.append(("on_exhausted", dimension))

    def on_finish(self, episode: Any, result: Any) -> None:
        self.calls.append(("on_finish", str(result.status)))


class Exploding(Hooks):
    """Every hook raises."""

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("on_"):

            def boom(*args: Any) -> None:
                raise RuntimeError(f"hook {name} exploded")

            return boom
        return object.__getattribute__(self, name)


def test_taxonomy() -> None:
    assert {str(k) for k in MistakeKind} == TAXONOMY
    with pytest.raises(ValueError):
        MistakeKind("typo")


def _scripted_episode(c: BudgetController, clock: FakeClock) -> Any:
    """Turn 1: bad JSON args + unknown tool; turn 2: tool raises; turn 3: recovery;
    turn 4: env fails; turn 5: provider fails (not charged); turn 5 again: bad format,
    then success."""
    with c.episode(name="scripted") as ep:
        ep.begin_turn(model="m")
        bad_args = '{"x": 1'
        with pytest.raises(json.JSONDecodeError):
            json.loads(bad_args)
        ep.record_mistake("invalid_tool_arguments", tool="add", call_id="c1", detail="bad json")
        ep.record_mistake(MistakeKind.UNKNOWN_TOOL, tool="nope", call_id="c2")
        ep.begin_turn(model="m")
        (call,) = ep.tool_batch(["div"], ["c3"])
        with pytest.raises(ZeroDivisionError):
            call.run(lambda: 1 / 0)
        ep.begin_turn(model="m")
        (call,) = ep.tool_batch(["add"], ["c4"])
        assert call.run(lambda a, b: a + b, 2, 3) == 5
        ep.begin_turn(model="m")
        ep.record_step(ok=False, detail="wall in the way")
        turn = ep.begin_turn(model="m")

        def down() -> None:
            raise ConnectionError("refused")

        with pytest.raises(ProviderError):
            turn.call(down, sleep=clock.sleep)
        retry_turn = ep.begin_turn(model="m")  # the failed request was not charged
        assert retry_turn.number == turn.number == 5
        ep.record_mistake("model_format_error", detail="no action")
        ep.record_step(ok=True, progress=True)
        ep.finish(success=True, output="5")
    return ep


def test_mistakes_and_recoveries_record_ids_turns_and_call_ids(fake_clock: FakeClock) -> None:
    rec = Recorder()
    c = BudgetController(
        Budget(turns=6),
        hooks=[rec],
        retry=RetryPolicy(max_attempts=2, jitter=0.0),
        clock=fake_clock,
    )
    ep = _scripted_episode(c, fake_clock)
    r = ep.result
    assert r.status is EpisodeStatus.SUCCESS and r.final_output == "5"
    got = [(m.id, str(m.kind), m.turn, m.tool, m.call_id) for m in r.mistakes]
    assert got == [
        ("m1", "invalid_tool_arguments", 1, "add", "c1"),
        ("m2", "unknown_tool", 1, "nope", "c2"),
        ("m3", "tool_error", 2, "div", "c3"),
        ("m4", "env_action_failed", 4, None, None),
        # the failed request is not charged, but its mistake belongs to the turn it was
        ("m5", "provider_error", 5, None, None),
        ("m6", "model_format_error", 5, None, None),
    ]
    assert r.mistakes[2].detail.startswith("ZeroDivisionError")
    assert r.mistakes[4].detail == "ConnectionError"
    assert [(x.id, x.turn, x.recovered, x.turns_to_recover) for x in r.recoveries] == [
        ("r1", 3, ("m1", "m2", "m3"), 2),
        ("r2", 5, ("m4", "m5", "m6"), 1),
    ]
    assert r.used["turns"] == 5
    d = r.to_dict()
    json.dumps(d)
    assert d["mistakes"][0]["kind"] == "invalid_tool_arguments"
    assert d["recoveries"][0]["recovered"] == ["m1", "m2", "m3"]

    names = [name for name, _ in rec.calls]
    assert set(names) == {
        "on_turn",
        "on_tool_result",
        "on_mistake",
        "on_recovery",
        "on_budget_warning",
        "on_finish",
    }
    assert [p for n, p in rec.calls if n == "on_turn"] == [1, 2, 3, 4, 5, 5]
    assert [p for n, p in rec.calls if n == "on_budget_warning"] == [2]
    assert [p for n, p in rec.calls if n == "on_mistake"] == [f"m{i}" for i in range(1, 7)]
    assert [p for n, p in rec.calls if n == "on_recovery"] == ["r1", "r2"]
    assert [p for n, p in rec.calls if n == "on_tool_result"] == [("div", False), ("add", True)]
    assert rec.calls[-1] == ("on_finish", "success")
    assert names.count("on_finish") == 1
    assert all(name.startswith("on_") for name in vars(Hooks) if not name.startswith("_"))


def test_steps_are_visible_to_policies() -> None:
    c = BudgetController(Budget(turns=3))
    with c.episode() as ep:
        ep.begin_turn()
        ep.record_step(ok=False, mistake="model_format_error")
        ep.record_step(ok=True, progress=True)
        assert list(ep.steps) == [
            StepRecord(1, ok=False, mistake="model_format_error"),
            StepRecord(1, ok=True, progress=True),
        ]


def test_success_with_pending_mistakes_closes_them_as_a_recovery() -> None:
    c = BudgetController(Budget(turns=3))
    with c.episode() as ep:
        ep.begin_turn()
        ep.record_mistake("tool_error")
        ep.begin_turn()
        ep.finish(success=True)
    assert ep.result is not None
    assert [(r.recovered, r.turns_to_recover) for r in ep.result.recoveries] == [(("m1",), 1)]


def test_exhausted_hook_fires_once() -> None:
    rec = Recorder()
    c = BudgetController(Budget(turns=1), hooks=[rec])
    with c.episode() as ep:
        for _ in ep.turns():
            pass
    assert [p for n, p in rec.calls if n == "on_exhausted"] == ["turns"]
    assert rec.calls[-1] == ("on_finish", "budget_exhausted")


def test_hooks_that_raise_corrupt_neither_ledger_nor_outcome(fake_clock: FakeClock) -> None:
    plain = BudgetController(
        Budget(turns=10), retry=RetryPolicy(max_attempts=2, jitter=0.0), clock=fake_clock
    )
    noisy = BudgetController(
        Budget(turns=10),
        hooks=[Exploding(), Recorder()],
        retry=RetryPolicy(max_attempts=2, jitter=0.0),
        clock=fake_clock,
    )
    expected = _scripted_episode(plain, fake_clock).result
    ep = _scripted_episode(noisy, fake_clock)
    got = ep.result
    assert got.status is expected.status
    assert got.used == expected.used
    assert [m.to_dict() for m in got.mistakes] == [m.to_dict() for m in expected.mistakes]
    assert got.recoveries == expected.recoveries
    assert ep._hook_errors  # recorded on the episode, not raised
    # the second hook still ran after the first one raised
    recorder = noisy.hooks[1]
    assert isinstance(recorder, Recorder) and recorder.calls[-1] == ("on_finish", "success")


def test_hook_raising_at_exhaustion_still_ends_budget_exhausted() -> None:
    c = BudgetController(Budget(turns=1, tool_calls=1), hooks=[Exploding()])
    with c.episode() as ep:
        ep.begin_turn()
        ep.tool_batch(["a"])[0].succeed()
        ep.tool_batch(["a"])
    assert ep.result is not None
    assert ep.result.status is EpisodeStatus.BUDGET_EXHAUSTED
    assert ep.result.stop_reason == "tool_calls"
    assert ep.result.used["tool_calls"] == 1


def test_record_tool_result_once_per_call_id() -> None:
    c = BudgetController(Budget(turns=5, tool_calls=5))
    with c.episode() as ep:
        ep.begin_turn()
        assert ep.record_tool_result("a", ok=False, tool="search", detail="timeout")
        assert not ep.record_tool_result("a", ok=True)  # its outcome is already known
        ep.begin_turn()
        with ep.tool_call("search", "b") as call:
            call.succeed("found")
        assert not ep.record_tool_result("b", ok=True)  # recorded by the ToolCall
        assert ep.record_tool_result("c", ok=True)
    (mistake,) = ep.mistakes
    assert (mistake.kind, mistake.tool, mistake.call_id, mistake.detail) == (
        MistakeKind.TOOL_ERROR,
        "search",
        "a",
        "timeout",
    )
    (recovery,) = ep.recoveries  # the ToolCall's success recovered "a"
    assert recovery.recovered == (mistake.id,)
    assert [s.ok for s in ep.steps] == [False, True, True]


def test_a_mistake_detail_is_kept_with_credentials_masked() -> None:
    """A tool's error text reaches the result, its JSON form and every log of it."""
    key = "sk-test-DEADBEEFdeadbeef0123456789abcdef"
    with BudgetController(Budget(turns=2)).episode() as ep:
        (call,) = ep.tool_batch(["lookup"])
        with pytest.raises(PermissionError):
            call.run(_raise, PermissionError(f"denied: Authorization: Bearer {key}"))
        ep.record_mistake("model_format_error", detail=f"echoed {key}")
        ep.finish(False)
    assert ep.result is not None
    details = [m.detail for m in ep.result.mistakes]
    assert all(key not in d for d in details) and details[0].startswith("PermissionError: denied")
    assert key not in json.dumps(ep.result.to_dict())


def _raise(exc: BaseException) -> None:
    raise exc
