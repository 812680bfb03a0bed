"""Extension rules through real episodes: on demand (tool) and on progress."""

from __future__ import annotations

from typing import Any

import pytest
from budgetmix import Budget, BudgetController, ConfigError
from budgetmix.adapters.base import ToolSpec
from budgetmix.policies import (
    ON_DEMAND_GRANTS_KEY,
    REQUEST_MORE_TURNS,
    AnyOf,
    ExtendOnDemand,
    ExtendOnProgress,
    build_controller_kwargs,
    extension_from_config,
    find_on_demand,
    request_more_turns_tool,
    with_free_request_tool,
)


def test_progress_extension_extends_once_and_the_notice_shows_the_new_total() -> None:
    controller = BudgetController(
        Budget(turns=3), extension=ExtendOnProgress(turns=2, once=True, lookback=2)
    )
    with controller.episode() as ep:
        seen = []
        for turn in ep.turns():
            seen.append(turn.notice)
            ep.record_step(ok=True, progress=True)
    result = ep.result
    assert result is not None
    assert result.status == "budget_exhausted"
    assert result.used["turns"] == 5 and result.limits["turns"] == 5
    assert seen[3] == "Budget (v1): turn 4 of 5, 2 turns left including this one."
    assert [e.kind for e in result.events].count("extended") == 1
    assert ep.grants == 1


def test_progress_extension_needs_recent_progress() -> None:
    controller = BudgetController(Budget(turns=3), extension=ExtendOnProgress(lookback=2))
    with controller.episode() as ep:
        for turn in ep.turns():
            # progress only on the first turn: outside the lookback at the limit
            ep.record_step(ok=True, progress=turn.number == 1)
    assert ep.result is not None and ep.result.used["turns"] == 3
    assert ep.grants == 0


def test_progress_extension_without_once_keeps_granting() -> None:
    controller = BudgetController(
        Budget(turns=2), extension=ExtendOnProgress(turns=1, once=False, lookback=1)
    )
    with controller.episode() as ep:
        for turn in ep.turns():
            ep.record_step(ok=True, progress=turn.number < 4)
    assert ep.result is not None and ep.result.used["turns"] == 4
    assert ep.grants == 2


@pytest.mark.timeout(30)
def test_progress_extension_ignores_a_parent_limit() -> None:
    # raising the child's limit cannot help when the parent refuses: must not loop
    controller = BudgetController(
        Budget(turns=2), extension=ExtendOnProgress(turns=1, once=False, lookback=5)
    )
    with controller.episode() as parent:
        with parent.child(Budget(turns=10)) as child:
            for _ in child.turns():
                child.record_step(ok=True, progress=True)
        assert child.result is not None and child.result.used["turns"] == 2
        assert child.result.status == "budget_exhausted"
        assert child.grants == 0


def _ask(ep: Any, ext: ExtendOnDemand, turns: Any) -> str:
    (call,) = ep.tool_batch([REQUEST_MORE_TURNS])
    reply: str = call.run(ext.run_tool, ep, {"turns": turns})
    return reply


def test_on_demand_grants_up_to_step_and_caps_grants() -> None:
    ext = ExtendOnDemand(step=2, max_grants=2)
    controller = BudgetController(
        Budget(turns=2, tool_calls=1), **build_controller_kwargs({"extension": ext.to_config()})
    )
    replies = []
    with controller.episode() as ep:
        for turn in ep.turns():
            if turn.number <= 3:
                replies.append(_ask(ep, ext, 5 if turn.number == 1 else 1))
    assert replies == ["Granted 2 more turns.", "Granted 1 more turn.", "No turns granted."]
    result = ep.result
    assert result is not None
    assert result.limits["turns"] == 5 and result.used["turns"] == 5
    # the request tool is free: three calls under a one-call limit
    assert result.used["tool_calls"] == 0
    assert result.metadata[ON_DEMAND_GRANTS_KEY] == [
        {"turn": 1, "requested": 5, "granted": 2},
        {"turn": 2, "requested": 1, "granted": 1},
        {"turn": 3, "requested": 1, "granted": 0},
    ]
    assert [e.kind for e in result.events].count("extended") == 2


def test_on_demand_bad_arguments_are_tool_mistakes() -> None:
    ext = ExtendOnDemand()
    controller = BudgetController(Budget(turns=2), extension=ext)
    with controller.episode() as ep:
        ep.begin_turn()
        with pytest.raises(ValueError, match="turns"):
            _ask(ep, ext, 0)
        with pytest.raises(ValueError, match="turns"):
            _ask(ep, ext, "3")
        (call,) = ep.tool_batch([REQUEST_MORE_TURNS])
        with pytest.raises(ValueError, match="exactly one argument"):
            call.run(ext.run_tool, ep, {"turns": 1, "why": "x"})
        ep.finish(success=False)
    assert ep.result is not None
    assert [m.kind for m in ep.result.mistakes] == ["tool_error"] * 3
    assert ep.grants == 0


def test_on_demand_never_grants_at_the_limit() -> None:
    controller = BudgetController(Budget(turns=1), extension=ExtendOnDemand())
    with controller.episode() as ep:
        for _ in ep.turns():
            ep.record_step(ok=True, progress=True)
    assert ep.result is not None and ep.result.used["turns"] == 1


def test_tool_spec_is_toolspec_compatible() -> None:
    spec = ToolSpec(**request_more_turns_tool())
    assert spec.name == REQUEST_MORE_TURNS
    assert spec.parameters["required"] == ["turns"]
    assert "must" not in spec.description.lower()


def test_composition_first_grant_wins_and_find_on_demand() -> None:
    on_demand = ExtendOnDemand(step=3)
    rule = on_demand | ExtendOnProgress(turns=1)
    assert isinstance(rule, AnyOf)
    assert find_on_demand(rule) is on_demand
    assert find_on_demand(ExtendOnProgress()) is None
    assert find_on_demand(None) is None
    controller = BudgetController(Budget(turns=1), extension=rule)
    with controller.episode() as ep:
        for _ in ep.turns():
            ep.record_step(ok=True, progress=True)
    assert ep.result is not None and ep.result.used["turns"] == 2


def test_with_free_request_tool() -> None:
    acc = with_free_request_tool()
    assert REQUEST_MORE_TURNS in acc.refunded_tools
    assert acc.name == "refund_tools"


@pytest.mark.parametrize(
    "rule",
    [
        ExtendOnDemand(step=4, max_grants=3),
        ExtendOnProgress(turns=1, once=False, lookback=4),
        ExtendOnDemand() | ExtendOnProgress(),
    ],
)
def test_config_round_trip(rule: Any) -> None:
    assert extension_from_config(rule.to_config()) == rule


def test_config_shorthands() -> None:
    assert extension_from_config(None) is None
    assert extension_from_config("off") is None
    assert extension_from_config("progress") == ExtendOnProgress()


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"kind": "magic"}, "extension.kind"),
        ({"kind": "on_demand", "step": -1}, "extension.step"),
        ({"kind": "on_demand", "max_grants": 0}, "extension.max_grants"),
        ({"kind": "on_demand", "max_grants": 1.5}, "extension.max_grants"),
        ({"kind": "progress", "turns": -3}, "extension.turns"),
        ({"kind": "progress", "lookback": 0}, "extension.lookback"),
        ({"kind": "progress", "once": "yes"}, "extension.once"),
        ({"kind": "progress", "step": 2}, "step"),
        ({"kind": "any", "of": ["off"]}, r"extension.of\[0\]"),
        ({"kind": "any", "of": "progress"}, "extension.of"),
        (3, "extension"),
    ],
)
def test_bad_config_names_the_field(config: Any, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        extension_from_config(config)


def test_bad_constructor_values() -> None:
    with pytest.raises(ConfigError, match=r"ExtendOnDemand\.step"):
        ExtendOnDemand(step=0)
    with pytest.raises(ConfigError, match=r"ExtendOnProgress\.lookback"):
        ExtendOnProgress(lookback=-1)
