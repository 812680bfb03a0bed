"""Hostile values at the core API: each fails at the call with an error of the
budgetmix tree naming the argument, or is handled as documented; nothing is left
half-charged in any ledger of the chain."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest
from _sdk_doubles import FakeClock
from budgetmix import (
    AccountingPolicy,
    Budget,
    BudgetController,
    BudgetmixError,
    ConfigError,
    EpisodeStatus,
    Ledger,
    MistakeKind,
    RetryPolicy,
)
from budgetmix.budget import MAX_COST_USD, MAX_COUNT, MAX_WALL_SECONDS
from budgetmix.policies import ExtendOnDemand
from budgetmix.provider_errors import TransientInfo

COUNT_FIELDS = ("turns", "tool_calls", "input_tokens", "output_tokens", "total_tokens")
HUGE = (10**400, MAX_COUNT + 1, 10**5000)  # 10**5000 has no decimal str() under 3.11+'s limit


# -- budgets ------------------------------------------------------------------------------
@pytest.mark.parametrize("field", COUNT_FIELDS)
@pytest.mark.parametrize("value", HUGE, ids=["1e400", "2**53+1", "1e5000"])
def test_budget_refuses_a_count_above_the_maximum(field: str, value: int) -> None:
    kwargs: dict[str, Any] = {"turns": 3, field: value}
    with pytest.raises(ConfigError, match=rf"Budget\.{field} must be at most"):
        Budget(**kwargs)


@pytest.mark.parametrize(
    ("field", "maximum"), [("cost_usd", MAX_COST_USD), ("wall_seconds", MAX_WALL_SECONDS)]
)
@pytest.mark.parametrize("over", [10**400, 2.0, 10.0**290], ids=["1e400", "twice", "1e290x"])
def test_budget_refuses_an_amount_above_the_maximum(field: str, maximum: float, over: Any) -> None:
    value = over if isinstance(over, int) else maximum * over
    with pytest.raises(ConfigError, match=rf"Budget\.{field} must be at most"):
        Budget(turns=3, **{field: value})


def test_budget_at_the_maximum_runs_and_keeps_ints() -> None:
    budget = Budget(
        turns=MAX_COUNT, tool_calls=MAX_COUNT, total_tokens=MAX_COUNT, cost_usd=MAX_COST_USD
    )
    assert type(Budget(turns=3, cost_usd=2).cost_usd) is float  # amounts are floats
    c = BudgetController(budget)
    with c.episode() as ep:
        turn = ep.begin_turn()
        assert turn.notice is not None
        turn.usage(input_tokens=MAX_COUNT, output_tokens=MAX_COUNT, cost_usd=MAX_COST_USD)
        ep.tool_call("search").succeed()
        ep.finish(success=True)
    assert ep.result is not None and ep.result.status is EpisodeStatus.SUCCESS
    assert ep.result.used["total_tokens"] == 2 * MAX_COUNT
    assert ep.state.remaining("total_tokens") == 0


def test_budget_from_dict_refuses_a_non_mapping() -> None:
    with pytest.raises(ConfigError, match="Budget"):
        Budget.from_dict([("turns", 3)])  # type: ignore[arg-type]


# -- counts are whole numbers ---------------------------------------------------------------
def test_counts_in_results_and_states_are_ints() -> None:
    c = BudgetController(Budget(turns=5, tool_calls=5), retry=RetryPolicy(max_attempts=1))
    with c.episode() as ep:
        for _ in range(3):
            ep.begin_turn().usage(input_tokens=7, output_tokens=2)
        ep.tool_batch(["a", "b"])[0].succeed()
        turn = ep.begin_turn()
        with pytest.raises(BudgetmixError):
            turn.call(lambda: (_ for _ in ()).throw(ValueError("bad request")))  # refunded
        assert type(ep.state.used["turns"]) is int
        ep.finish(success=True)
    assert ep.result is not None
    used = ep.result.used
    assert used["turns"] == 3
    for dim in COUNT_FIELDS:
        assert type(used[dim]) is int, (dim, used[dim])
        assert type(ep.result.to_dict()["used"][dim]) is int, dim
    assert type(ep.state.remaining("turns")) is int


# -- charges are atomic over the whole chain ----------------------------------------------------
@pytest.mark.parametrize(
    "usage",
    [
        {"input_tokens": 3, "output_tokens": 10**400},
        {"input_tokens": 3, "output_tokens": 4, "cost_usd": 10**400},
        {"input_tokens": 3, "cost_usd": math.nan},
        {"input_tokens": MAX_COUNT + 1},
    ],
)
def test_a_huge_usage_figure_charges_no_ledger_of_the_chain(usage: dict[str, Any]) -> None:
    root = Ledger(Budget(turns=5, total_tokens=100))
    child = Ledger(Budget(turns=5), parent=root)
    bad = list(usage)[-1]  # the last figure is the bad one: the others pass its checks
    with pytest.raises(ConfigError, match=rf"usage\.{bad}"):
        child.add_usage(**usage)
    for node in (child, root):
        assert node.counts()["input_tokens"] == 0 and node.counts()["cost_usd"] == 0


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("input_tokens", "7"),
        ("input_tokens", True),
        ("input_tokens", 7.0),
        ("input_tokens", -1),
        ("output_tokens", None),
        ("cost_usd", "0.1"),
        ("cost_usd", -0.5),
        ("cost_usd", math.inf),
        ("cache_read_tokens", "3"),
        ("cache_write_tokens", -2),
    ],
)
def test_turn_usage_names_the_bad_argument_and_charges_nothing(name: str, value: Any) -> None:
    c = BudgetController(Budget(turns=3))
    with c.episode() as parent, parent.child(Budget(turns=3)) as ep:
        turn = ep.begin_turn()
        with pytest.raises(ConfigError, match=rf"usage\.{name}"):
            turn.usage(**{"input_tokens": 5, name: value})
        for node in (ep, parent):
            assert node.ledger.counts()["input_tokens"] == 0
        turn.usage(input_tokens=5)  # the turn is still usable
        assert parent.ledger.counts()["input_tokens"] == 5


def test_ledger_charges_refuse_nonsense_amounts() -> None:
    root = Ledger(Budget(turns=5))
    child = Ledger(Budget(turns=5), parent=root)
    for bad in (-3, 0, True, 1.5, "1", 10**400):
        with pytest.raises(ConfigError, match="turns"):
            child.try_charge_turn(bad)
        with pytest.raises(ConfigError, match="turns"):
            child.refund_turn(bad)
    assert root.counts()["turns"] == child.counts()["turns"] == 0


# -- grants -----------------------------------------------------------------------------------
@pytest.mark.parametrize("amount", [10**400, 10**5000, MAX_COUNT], ids=["1e400", "1e5000", "max"])
def test_grant_above_the_maximum_is_a_config_error(amount: int) -> None:
    c = BudgetController(Budget(turns=2, tool_calls=2))
    with c.episode() as ep:
        with pytest.raises(ConfigError, match=r"grant\.turns"):
            ep.grant(turns=amount)
        with pytest.raises(ConfigError, match=r"grant\.turns"):
            ep.grant(tool_calls=1, turns=amount)  # one bad amount: nothing granted
        assert ep.ledger.limits()["turns"] == 2 and ep.ledger.limits()["tool_calls"] == 2
        assert ep.grants == 0
    assert ep.result is not None and ep.result.status is EpisodeStatus.FAILED


def test_grant_up_to_the_maximum_is_allowed() -> None:
    ledger = Ledger(Budget(turns=2, cost_usd=1.0))
    assert ledger.grant(turns=MAX_COUNT - 2)["turns"] == MAX_COUNT
    with pytest.raises(ConfigError, match=r"grant\.cost_usd"):
        ledger.grant(cost_usd=MAX_COST_USD)
    with pytest.raises(ConfigError, match=r"grant\.cost_usd"):
        ledger.grant(cost_usd=10**400)


def test_policy_counts_are_bounded_at_construction() -> None:
    with pytest.raises(ConfigError, match=r"ExtendOnDemand\.step"):
        ExtendOnDemand(step=10**400)


# -- retry policy ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("jitter", math.nan),
        ("jitter", math.inf),
        ("jitter", 1.5),
        ("jitter", True),
        ("initial_delay", math.nan),
        ("initial_delay", -1.0),
        ("initial_delay", "0.5"),
        ("max_delay", math.inf),
        ("max_delay", 10**400),
        ("multiplier", math.nan),
        ("multiplier", 0.5),
        ("multiplier", 10**400),
        ("max_attempts", 2.0),
        ("max_attempts", "3"),
        ("max_attempts", 10**400),
        ("honour_retry_after", "yes"),
    ],
)
def test_retry_policy_validates_every_field(field: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=rf"RetryPolicy\.{field}"):
        RetryPolicy(**{field: value})


def test_retry_delays_stay_finite_for_any_attempt() -> None:
    import random

    policy = RetryPolicy(max_attempts=1000, initial_delay=1.0, multiplier=100.0, max_delay=60.0)
    rng = random.Random(0)
    for attempt in (1, 2, 3, 60, 999, 10**6):
        d = policy.delay(attempt, TransientInfo(True), rng)
        assert math.isfinite(d) and 0 <= d <= 60.0 * 1.25, (attempt, d)
    zero = RetryPolicy(initial_delay=0.0, multiplier=100.0)
    assert zero.delay(10**6, TransientInfo(True), rng) == 0.0


def test_nan_jitter_no_longer_fails_the_first_transient_error() -> None:
    # before: RetryPolicy(jitter=nan) was accepted and the first retry crashed
    with pytest.raises(ConfigError, match=r"RetryPolicy\.jitter"):
        RetryPolicy(jitter=math.nan)


# -- tool exceptions and mistakes ------------------------------------------------------------
class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str for you")


def _raise_unprintable() -> None:
    raise Unprintable


def test_tool_exception_with_broken_str_is_recorded_and_reraised() -> None:
    c = BudgetController(Budget(turns=3, tool_calls=3))
    with c.episode() as ep:
        ep.begin_turn()
        (call,) = ep.tool_batch(["search"], ["c1"])
        with pytest.raises(Unprintable):
            call.run(_raise_unprintable)
        assert call.ok is False
    assert ep.result is not None
    (m,) = ep.result.mistakes
    assert m.kind is MistakeKind.TOOL_ERROR and m.tool == "search" and m.call_id == "c1"
    assert m.detail.startswith("Unprintable") and "unprintable" in m.detail


def test_decorated_tools_record_a_broken_str_exception() -> None:
    c = BudgetController(Budget(turns=3, tool_calls=3))

    @c.tool
    def sync_tool() -> None:
        _raise_unprintable()

    @c.tool
    async def async_tool() -> None:
        _raise_unprintable()

    with c.episode() as ep:
        ep.begin_turn()
        with pytest.raises(Unprintable):
            sync_tool()
        with pytest.raises(Unprintable):
            asyncio.run(async_tool())
    assert ep.result is not None
    assert [m.kind for m in ep.result.mistakes] == [MistakeKind.TOOL_ERROR] * 2
    assert ep.result.used["tool_calls"] == 2


def test_episode_body_raising_a_broken_str_exception_ends_as_error() -> None:
    c = BudgetController(Budget(turns=3))
    with pytest.raises(Unprintable), c.episode() as ep:
        ep.begin_turn()
        _raise_unprintable()
    assert ep.result is not None and ep.result.status is EpisodeStatus.ERROR
    assert ep.result.error is not None and ep.result.error.startswith("Unprintable")


@pytest.mark.parametrize("kind", ["bogus", 3, None])
def test_unknown_mistake_kind_is_a_config_error(kind: Any) -> None:
    c = BudgetController(Budget(turns=3, tool_calls=3))
    with c.episode() as ep:
        ep.begin_turn()
        with pytest.raises(ConfigError, match="kind"):
            ep.record_mistake(kind)
        (call,) = ep.tool_batch(["t"])
        with pytest.raises(ConfigError, match="kind"):
            call.fail("x", kind=kind)
        with pytest.raises(ConfigError, match="detail"):
            ep.record_mistake(MistakeKind.TOOL_ERROR, detail=42)  # type: ignore[arg-type]
        assert ep.mistakes == []


@pytest.mark.parametrize("names", ["search", [1, 2], ["a", None], None, {"a": 1}])
def test_tool_batch_names_must_be_a_list_of_strings(names: Any) -> None:
    c = BudgetController(Budget(turns=3, tool_calls=30))
    with c.episode() as ep:
        ep.begin_turn()
        with pytest.raises(ConfigError, match="names"):
            ep.tool_batch(names)
        assert ep.ledger.counts()["tool_calls"] == 0


def test_tool_batch_call_ids_must_match_and_be_strings() -> None:
    c = BudgetController(Budget(turns=3, tool_calls=30))
    with c.episode() as ep:
        ep.begin_turn()
        with pytest.raises(ConfigError, match="call_ids"):
            ep.tool_batch(["a"], [1])  # type: ignore[list-item]
        with pytest.raises(ConfigError, match="call_ids"):
            ep.tool_batch(["a", "b"], ["x"])
        assert ep.ledger.counts()["tool_calls"] == 0


# -- controller and accounting arguments -------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"warn_fraction": "0.2"}, "warn_fraction"),
        ({"warn_fraction": True}, "warn_fraction"),
        ({"warn_fraction": math.nan}, "warn_fraction"),
        ({"retry": "fast"}, "retry"),
        ({"accounting": {"turn_unit": "response"}}, "accounting"),
        ({"name": 3}, "name"),
        ({"capture_content": "no"}, "capture_content"),
        ({"hooks": object()}, "hooks"),
        ({"clock": 1.0}, "clock"),
        ({"provider_name": 5}, "provider_name"),
    ],
)
def test_controller_arguments_are_validated(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        BudgetController(Budget(turns=3), **kwargs)


def test_episode_arguments_are_validated() -> None:
    c = BudgetController(Budget(turns=3), clock=FakeClock())
    for kwargs, field in (
        ({"budget": {"turns": 3}}, "budget"),
        ({"name": 1}, "name"),
        ({"metadata": [1]}, "metadata"),
        ({"episode_id": 7}, "episode_id"),
    ):
        with pytest.raises(ConfigError, match=field):
            c.episode(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"refunded_tools": "search"}, "refunded_tools"),
        ({"refunded_tools": [1]}, "refunded_tools"),
        ({"count_retries": "yes"}, "count_retries"),
        ({"count_failed_tool_calls": 1}, "count_failed_tool_calls"),
        ({"name": None}, "name"),
    ],
)
def test_accounting_policy_fields_are_validated(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=rf"AccountingPolicy\.{field}"):
        AccountingPolicy(**kwargs)


def test_a_refund_gives_back_at_most_what_the_ledger_holds() -> None:
    root = Ledger(Budget(turns=9, tool_calls=9))
    busy, idle = Ledger(Budget(turns=9), parent=root), Ledger(Budget(turns=9), parent=root)
    assert busy.try_charge_turn(3) is None
    assert busy.try_charge_tool_batch(["a", "b"]) is None
    idle.refund_turn(2)  # idle holds no turn: the root keeps busy's three
    idle.refund_tool_call("a")
    busy.refund_turn(5)  # busy holds three: it gives back three, not five
    assert (root.counts()["turns"], busy.counts()["turns"], idle.counts()["turns"]) == (0, 0, 0)
    assert root.counts()["tool_calls"] == busy.counts()["tool_calls"] == 2
    assert busy.try_charge_turn(2) is None
    assert idle.try_charge_turn(1) is None
    busy.refund_turn(9)
    assert (root.counts()["turns"], busy.counts()["turns"]) == (1, 0)


def test_ledger_arguments_are_validated() -> None:
    for kwargs, field in (
        ({"parent": "root"}, "parent"),
        ({"accounting": "default"}, "accounting"),
        ({"clock": 0.0}, "clock"),
    ):
        with pytest.raises(ConfigError, match=field):
            Ledger(Budget(turns=3), **kwargs)
    with pytest.raises(ConfigError, match="name"):
        Ledger(Budget(turns=3)).refund_tool_call(["a"])  # type: ignore[arg-type]


def test_mistake_tool_and_call_id_must_be_strings() -> None:
    c = BudgetController(Budget(turns=3))
    with c.episode() as ep:
        for kwargs, field in (({"tool": 3}, "tool"), ({"call_id": ["c"]}, "call_id")):
            with pytest.raises(ConfigError, match=field):
                ep.record_mistake(MistakeKind.TOOL_ERROR, **kwargs)
        assert ep.mistakes == []
