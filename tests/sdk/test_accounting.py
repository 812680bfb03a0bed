"""The accounting table: what counts as a turn and a tool call, checked before dispatch."""

from __future__ import annotations

from typing import Any

import pytest
from _sdk_doubles import FakeClock
from budgetmix import (
    DEFAULT_ACCOUNTING,
    AccountingPolicy,
    Budget,
    BudgetController,
    BudgetExhausted,
    ConfigError,
    EpisodeStatus,
    ProviderError,
    RetryPolicy,
)

NO_WAIT = RetryPolicy(max_attempts=5, initial_delay=0.0, jitter=0.0)


class Status503(Exception):
    status_code = 503


class CountingModel:
    """A zero-latency model; ``fail_first`` calls raise a transient 503."""

    def __init__(self, fail_first: int = 0, tool_calls: int = 0) -> None:
        self.calls = 0
        self.fail_first = fail_first
        self.tool_calls = tool_calls

    def __call__(self) -> dict[str, Any]:
        self.calls += 1
        if self.calls <= self.fail_first:
            raise Status503("busy")
        return {"tool_calls": [f"t{i}" for i in range(self.tool_calls)]}


def test_default_policy_is_exported_and_declared() -> None:
    assert AccountingPolicy() == DEFAULT_ACCOUNTING
    attrs = DEFAULT_ACCOUNTING.as_attributes()
    assert attrs["budgetmix.accounting.turn_unit"] == "response"
    assert attrs["budgetmix.accounting.count_retries"] is False
    assert attrs["budgetmix.accounting.count_failed_tool_calls"] is True
    assert AccountingPolicy.from_dict(DEFAULT_ACCOUNTING.to_dict()) == DEFAULT_ACCOUNTING
    p = AccountingPolicy(name="x", refunded_tools=frozenset({"b", "a"}))
    assert AccountingPolicy.from_dict(p.to_dict()) == p
    with pytest.raises(ConfigError, match="turn_unit"):
        AccountingPolicy(turn_unit="step")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="bogus"):
        AccountingPolicy.from_dict({"bogus": 1})


def test_one_response_is_one_turn_whatever_its_tool_calls() -> None:
    c = BudgetController(Budget(turns=3))
    with c.episode() as ep:
        for n_calls in (0, 1, 7):
            turn = ep.begin_turn()
            model = CountingModel(tool_calls=n_calls)
            reply = turn.call(model)
            ep.tool_batch(reply["tool_calls"])
        assert ep.ledger.used("turns") == 3
        assert ep.ledger.used("tool_calls") == 8
        ep.finish(success=True)
    assert ep.result is not None
    assert ep.result.used["turns"] == 3 and ep.result.used["tool_calls"] == 8


def test_each_parallel_call_counts_and_the_batch_is_prechecked_whole() -> None:
    c = BudgetController(Budget(turns=5, tool_calls=4))
    ran: list[str] = []
    with c.episode() as ep:
        ep.begin_turn()
        for call in ep.tool_batch(["a", "b", "c"]):
            call.run(ran.append, call.name)
        assert ep.ledger.used("tool_calls") == 3
        ep.begin_turn()
        with pytest.raises(BudgetExhausted) as info:
            ep.tool_batch(["d", "e"])  # 3 + 2 > 4: refused whole
        assert info.value.dimension == "tool_calls"
        assert ep.ledger.used("tool_calls") == 3  # nothing of it was charged
        assert ran == ["a", "b", "c"]  # and nothing of it ran
    assert ep.result is not None
    assert ep.result.status is EpisodeStatus.BUDGET_EXHAUSTED
    assert ep.result.stop_reason == "tool_calls"
    assert ep.result.used["tool_calls"] == 3


def test_a_batch_that_fits_exactly_is_accepted() -> None:
    c = BudgetController(Budget(turns=2, tool_calls=3))
    with c.episode() as ep:
        ep.begin_turn()
        assert len(ep.tool_batch(["a", "b", "c"])) == 3
        assert ep.ledger.used("tool_calls") == 3


def test_retries_cost_no_turn_but_do_cost_wall_time(fake_clock: FakeClock) -> None:
    policy = RetryPolicy(max_attempts=4, initial_delay=2.0, multiplier=1.0, jitter=0.0)
    c = BudgetController(Budget(turns=2, wall_seconds=100), retry=policy, clock=fake_clock)
    model = CountingModel(fail_first=3)
    with c.episode() as ep:
        turn = ep.begin_turn()
        turn.call(model, sleep=fake_clock.sleep)
        assert model.calls == 4
        assert ep.ledger.used("turns") == 1
        assert fake_clock.sleeps == [2.0, 2.0, 2.0]
        assert ep.ledger.used("wall_seconds") == pytest.approx(6.0)
        ep.finish(success=True)
    assert ep.result is not None
    assert ep.result.used["turns"] == 1
    assert ep.result.used["wall_seconds"] == pytest.approx(6.0)


def test_count_retries_charges_a_turn_per_retry(fake_clock: FakeClock) -> None:
    c = BudgetController(
        Budget(turns=3),
        accounting=AccountingPolicy(count_retries=True),
        retry=NO_WAIT,
        clock=fake_clock,
    )
    model = CountingModel(fail_first=5)
    with c.episode() as ep:
        turn = ep.begin_turn()
        with pytest.raises(BudgetExhausted):
            turn.call(model, sleep=fake_clock.sleep)
        # 1 turn + 2 retries fill the budget; the third retry is refused before it is sent
        assert model.calls == 3
        assert ep.ledger.used("turns") == 3
    assert ep.result is not None
    assert ep.result.status is EpisodeStatus.BUDGET_EXHAUSTED


def test_a_request_failing_after_retries_costs_no_turn(fake_clock: FakeClock) -> None:
    c = BudgetController(Budget(turns=2), retry=RetryPolicy(max_attempts=2, jitter=0.0))
    with c.episode() as ep:
        turn = ep.begin_turn()
        with pytest.raises(ProviderError):
            turn.call(CountingModel(fail_first=9), sleep=fake_clock.sleep)
        assert ep.ledger.used("turns") == 0
    c2 = BudgetController(
        Budget(turns=2),
        accounting=AccountingPolicy(count_failed_requests=True),
        retry=RetryPolicy(max_attempts=2, jitter=0.0),
    )
    with c2.episode() as ep2:
        turn = ep2.begin_turn()
        with pytest.raises(ProviderError):
            turn.call(CountingModel(fail_first=9), sleep=fake_clock.sleep)
        assert ep2.ledger.used("turns") == 1


def test_failed_tool_calls_count_by_default() -> None:
    c = BudgetController(Budget(turns=2, tool_calls=2))
    with c.episode() as ep:
        ep.begin_turn()
        (call,) = ep.tool_batch(["boom"])
        with pytest.raises(ZeroDivisionError):
            call.run(lambda: 1 / 0)
        assert call.ok is False
        assert ep.ledger.used("tool_calls") == 1


def test_failed_tool_calls_refunded_when_the_policy_says_so() -> None:
    c = BudgetController(
        Budget(turns=2, tool_calls=2),
        accounting=AccountingPolicy(count_failed_tool_calls=False),
    )
    with c.episode() as ep:
        ep.begin_turn()
        ok, bad = ep.tool_batch(["fine", "boom"])
        ok.succeed("r")
        bad.fail("nope")
        assert ep.ledger.used("tool_calls") == 1
        assert [m.kind for m in ep.mistakes] == ["tool_error"]


def test_refunded_tools_are_free() -> None:
    c = BudgetController(
        Budget(turns=2, tool_calls=1),
        accounting=AccountingPolicy(refunded_tools=frozenset({"think"})),
    )
    with c.episode() as ep:
        ep.begin_turn()
        calls = ep.tool_batch(["think", "think", "search", "think"])
        assert len(calls) == 4
        assert ep.ledger.used("tool_calls") == 1
        with pytest.raises(BudgetExhausted):
            ep.tool_batch(["search"])


def test_turn_unit_tool_call_charges_a_turn_per_extra_call() -> None:
    c = BudgetController(Budget(turns=4), accounting=AccountingPolicy(turn_unit="tool_call"))
    with c.episode() as ep:
        ep.begin_turn()
        ep.tool_batch(["a", "b", "c"])  # the response's turn + 2 more
        assert ep.ledger.used("turns") == 3
        ep.begin_turn()
        with pytest.raises(BudgetExhausted) as info:
            ep.tool_batch(["a", "b"])  # would need a fifth turn: refused whole
        assert info.value.dimension == "turns"
        assert ep.ledger.used("turns") == 4
        assert ep.ledger.used("tool_calls") == 0 + 3


def test_model_call_without_a_turn_left_is_refused_before_any_request() -> None:
    model = CountingModel()
    c = BudgetController(Budget(turns=2))
    with c.episode() as ep:
        for turn in ep.turns(model="m"):
            turn.call(model)
    assert model.calls == 2
    assert ep.result is not None and ep.result.status is EpisodeStatus.BUDGET_EXHAUSTED

    model = CountingModel()
    raising = BudgetController(Budget(turns=2), exhaustion="raise")
    with pytest.raises(BudgetExhausted), raising.episode() as ep2:
        ep2.begin_turn().call(model)
        ep2.begin_turn().call(model)
        ep2.begin_turn().call(model)  # refused: begin_turn raises, the model is not called
    assert model.calls == 2


def test_refusal_under_end_mode_suppresses_inside_with() -> None:
    model = CountingModel()
    c = BudgetController(Budget(turns=1))
    with c.episode() as ep:
        ep.begin_turn().call(model)
        ep.begin_turn().call(model)
        pytest.fail("begin_turn must refuse the second turn")  # pragma: no cover
    assert model.calls == 1
    assert ep.result is not None and ep.result.stop_reason == "turns"


def test_token_and_cost_limits_refuse_the_next_turn() -> None:
    c = BudgetController(Budget(turns=10, total_tokens=100, cost_usd=1.0))
    with c.episode() as ep:
        ep.begin_turn().usage(input_tokens=60, output_tokens=40, cost_usd=0.1)
        assert ep.try_begin_turn() is None
    assert ep.result is not None and ep.result.stop_reason == "total_tokens"
    with c.episode() as ep:
        ep.begin_turn().usage(input_tokens=1, output_tokens=1, cost_usd=1.0)
        assert ep.try_begin_turn() is None
    assert ep.result is not None and ep.result.stop_reason == "cost_usd"


def test_wall_limit_refuses_the_next_turn(fake_clock: FakeClock) -> None:
    c = BudgetController(Budget(turns=10, wall_seconds=5), clock=fake_clock)
    with c.episode() as ep:
        ep.begin_turn()
        fake_clock.advance(5)
        assert ep.try_begin_turn() is None
    assert ep.result is not None and ep.result.stop_reason == "wall_seconds"


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf")])
def test_usage_must_be_non_negative_and_finite(bad: float) -> None:
    c = BudgetController(Budget(turns=2, cost_usd=1.0))
    with c.episode() as ep:
        turn = ep.begin_turn()
        with pytest.raises(ConfigError):
            turn.usage(cost_usd=bad)
        assert ep.ledger.used("cost_usd") == 0


def test_a_failed_request_refunds_its_turn_once() -> None:
    """Calling a turn again after a final failure re-charges it first: the failed
    request's refund never lets a later response go uncharged."""

    def bad_request() -> None:
        raise ValueError("400-shaped, not retried")

    model = CountingModel()
    c = BudgetController(Budget(turns=2), retry=RetryPolicy(max_attempts=1))
    with c.episode() as ep:
        ep.begin_turn().call(model)
        turn = ep.begin_turn()
        for _ in range(3):
            with pytest.raises(ProviderError):
                turn.call(bad_request)
            assert ep.ledger.used("turns") == 1
        assert turn.call(model) is not None  # charged again before it is sent
        assert ep.ledger.used("turns") == 2
        for t in ep.turns():
            t.call(model)
    assert model.calls == 2  # two responses under a two-turn budget
    assert ep.result is not None and ep.result.used["turns"] == 2


def test_a_failed_grace_turn_refunds_nothing() -> None:
    c = BudgetController(Budget(turns=2), retry=RetryPolicy(max_attempts=1), exhaustion="grace")
    with c.episode() as parent:
        with parent.child(Budget(turns=1)) as child:
            child.begin_turn()
            grace = child.try_begin_turn()
            assert grace is not None and grace.grace
            with pytest.raises(ProviderError):
                grace.call(lambda: (_ for _ in ()).throw(ValueError("down")))
        # the child's one charged response stays charged, here and in the parent
        assert child.ledger.used("turns") == 1
        assert parent.ledger.used("turns") == 1
