"""Accounting presets change what a real episode is charged."""

from __future__ import annotations

from typing import Any

import pytest
from budgetmix import DEFAULT_ACCOUNTING, AccountingPolicy, Budget, BudgetController, ConfigError
from budgetmix.policies import (
    ACCOUNTING_PRESETS,
    COUNT_RETRIES,
    PER_TOOL_CALL_TURNS,
    accounting_from_config,
    accounting_preset,
    accounting_to_config,
    refund_tools,
)


def test_presets_by_name() -> None:
    assert set(ACCOUNTING_PRESETS) == {"default", "per_tool_call_turns", "count_retries"}
    assert accounting_preset("default") is DEFAULT_ACCOUNTING
    for name, policy in ACCOUNTING_PRESETS.items():
        assert policy.name == name


def test_per_tool_call_turns_charges_parallel_calls_as_turns() -> None:
    controller = BudgetController(Budget(turns=5), accounting=PER_TOOL_CALL_TURNS)
    with controller.episode() as ep:
        ep.begin_turn()
        for call in ep.tool_batch(["a", "b", "c"]):
            call.succeed("ok")
        ep.finish(success=True)
    assert ep.result is not None and ep.result.used["turns"] == 3


def test_count_retries_charges_each_retry() -> None:
    attempts: list[int] = []

    def flaky() -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise TimeoutError("slow")
        return "done"

    controller = BudgetController(Budget(turns=5), accounting=COUNT_RETRIES)
    with controller.episode() as ep:
        turn = ep.begin_turn()
        assert turn.call(flaky, sleep=lambda _: None) == "done"
        ep.finish(success=True)
    assert ep.result is not None and ep.result.used["turns"] == 3


def test_refund_tools_makes_named_tools_free() -> None:
    acc = refund_tools("search", "think")
    assert acc.refunded_tools == {"search", "think"} and acc.name == "refund_tools"
    controller = BudgetController(Budget(turns=2, tool_calls=1), accounting=acc)
    with controller.episode() as ep:
        ep.begin_turn()
        for call in ep.tool_batch(["search", "think", "run"]):
            call.succeed()
        ep.finish(success=True)
    assert ep.result is not None and ep.result.used["tool_calls"] == 1


def test_refund_tools_on_another_base_keeps_its_rules() -> None:
    acc = refund_tools("x", base=COUNT_RETRIES)
    assert acc.count_retries and acc.name == "count_retries+refund_tools"
    assert refund_tools("x", base=acc) is acc
    with pytest.raises(ConfigError, match="refund_tools"):
        refund_tools()
    with pytest.raises(ConfigError, match="refund_tools"):
        refund_tools("")


@pytest.mark.parametrize(
    "policy",
    [
        DEFAULT_ACCOUNTING,
        PER_TOOL_CALL_TURNS,
        COUNT_RETRIES,
        refund_tools("a", "b"),
        AccountingPolicy(name="mine", count_failed_tool_calls=False, count_failed_requests=True),
    ],
)
def test_config_round_trip(policy: AccountingPolicy) -> None:
    assert accounting_from_config(accounting_to_config(policy)) == policy


def test_config_forms() -> None:
    assert accounting_from_config(None) is DEFAULT_ACCOUNTING
    assert accounting_from_config("count_retries") is COUNT_RETRIES
    assert accounting_from_config({"preset": "per_tool_call_turns"}) is PER_TOOL_CALL_TURNS
    custom = accounting_from_config({"preset": "count_retries", "refunded_tools": ["t"]})
    assert custom.count_retries and custom.refunded_tools == {"t"} and custom.name == "custom"


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ("per_call", "accounting preset"),
        ({"preset": "nope"}, "accounting preset"),
        ({"colour": "red"}, "colour"),
        ({"count_retries": "yes"}, "accounting.count_retries"),
        ({"turn_unit": "step"}, "accounting.turn_unit"),
        ({"refunded_tools": "search"}, "accounting.refunded_tools"),
        ({"refunded_tools": [1]}, "accounting.refunded_tools"),
        ({"name": ""}, "accounting.name"),
        (42, "accounting"),
    ],
)
def test_bad_config_names_the_field(config: Any, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        accounting_from_config(config)
