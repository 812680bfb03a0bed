"""Notice rules, driven through real BudgetController episodes."""

from __future__ import annotations

from typing import Any

import pytest
from budgetmix import Budget, BudgetController, ConfigError, Ledger, render_notice
from budgetmix.policies import (
    AnyOf,
    NoticeRule,
    NotifyEveryTurn,
    NotifyFinalTurn,
    NotifyNever,
    NotifyWhenAtMost,
    notice_from_config,
)


def notices(rule: NoticeRule, turns: int = 5, **kwargs: Any) -> list[str | None]:
    controller = BudgetController(Budget(turns=turns), notice=rule, **kwargs)
    with controller.episode() as ep:
        seen = [turn.notice for turn in ep.turns()]
    assert ep.result is not None and ep.result.status == "budget_exhausted"
    return seen


def test_every_turn_is_the_sdk_default_byte_for_byte() -> None:
    default = [t for t in notices(NotifyEveryTurn())]
    controller = BudgetController(Budget(turns=5))
    with controller.episode() as ep:
        sdk = [turn.notice for turn in ep.turns()]
    assert default == sdk
    assert default[0] == "Budget (v1): turn 1 of 5, 5 turns left including this one."


def test_at_most_turns() -> None:
    seen = notices(NotifyWhenAtMost(2))
    assert seen[:3] == [None, None, None]
    assert seen[3:] == [
        "Budget (v1): turn 4 of 5, 2 turns left including this one.",
        "Budget (v1): turn 5 of 5, the final turn.",
    ]


def test_at_most_fraction_rounds_up_and_keeps_the_final_turn() -> None:
    assert [n is not None for n in notices(NotifyWhenAtMost(fraction=0.5), turns=5)] == [
        False,
        False,
        True,
        True,
        True,
    ]
    assert [n is not None for n in notices(NotifyWhenAtMost(fraction=0.01), turns=5)] == [
        False,
        False,
        False,
        False,
        True,
    ]


def test_final_turn_only() -> None:
    assert notices(NotifyFinalTurn(), turns=3) == [
        None,
        None,
        "Budget (v1): turn 3 of 3, the final turn.",
    ]


def test_off_is_silent_but_a_grace_turn_still_tells() -> None:
    assert notices(NotifyNever()) == [None] * 5
    seen = notices(NotifyNever(), turns=2, exhaustion="grace")
    assert seen[:2] == [None, None]
    assert len(seen) == 3 and seen[2] is not None


def test_or_composes_and_flattens() -> None:
    rule = NotifyFinalTurn() | NotifyWhenAtMost(3) | NotifyNever()
    assert isinstance(rule, AnyOf) and len(rule.rules) == 3
    assert [n is not None for n in notices(rule)] == [False, False, True, True, True]


def test_or_refuses_mixed_formats() -> None:
    with pytest.raises(ConfigError, match="format"):
        NotifyFinalTurn() | NotifyWhenAtMost(3, format="v1-compact")


def test_format_is_used() -> None:
    seen = notices(NotifyFinalTurn(format="v1-compact"), turns=2)
    assert seen == [None, "[budget v1c] turn 2/2, final"]


def test_remaining_only_golden_bytes() -> None:
    ledger = Ledger(Budget(turns=3, tool_calls=4), clock=lambda: 0.0)
    out = []
    for _ in range(3):
        ledger.try_charge_turn()
        out.append(render_notice(ledger.state(in_turn=True), "v1-remaining-only").encode())
    assert out == [
        b"Budget (v1r): 3 turns left including this one.",
        b"Budget (v1r): 2 turns left including this one.",
        b"Budget (v1r): the final turn.",
    ]
    assert notices(NotifyEveryTurn(format="v1-remaining-only"), turns=2) == [
        "Budget (v1r): 2 turns left including this one.",
        "Budget (v1r): the final turn.",
    ]


@pytest.mark.parametrize(
    "rule",
    [
        NotifyEveryTurn(),
        NotifyEveryTurn(format="v1-compact"),
        NotifyWhenAtMost(3),
        NotifyWhenAtMost(fraction=0.25),
        NotifyWhenAtMost(2, fraction=0.5, format="v1-remaining-only"),
        NotifyFinalTurn(),
        NotifyNever(),
        NotifyWhenAtMost(3) | NotifyFinalTurn(),
    ],
)
def test_config_round_trip(rule: NoticeRule) -> None:
    assert notice_from_config(rule.to_config()) == rule


def test_config_shorthands() -> None:
    assert notice_from_config(None) == NotifyEveryTurn()
    assert notice_from_config("final_turn") == NotifyFinalTurn()
    assert notice_from_config({"kind": "off"}) == NotifyNever()


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"kind": "sometimes"}, "notice.kind"),
        ({}, "notice.kind"),
        ("loud", "notice.kind"),
        ({"kind": "at_most"}, "notice.turns"),
        ({"kind": "at_most", "turns": -1}, "notice.turns"),
        ({"kind": "at_most", "turns": 0}, "notice.turns"),
        ({"kind": "at_most", "turns": "3"}, "notice.turns"),
        ({"kind": "at_most", "turns": True}, "notice.turns"),
        ({"kind": "at_most", "fraction": 1.5}, "notice.fraction"),
        ({"kind": "at_most", "fraction": -0.1}, "notice.fraction"),
        ({"kind": "final_turn", "format": "v2-shouty"}, "notice.format"),
        ({"kind": "final_turn", "turns": 3}, "turns"),
        ({"kind": "any", "of": []}, "notice.of"),
        ({"kind": "any", "of": [{"kind": "nope"}]}, r"notice.of\[0\].kind"),
        (["every_turn"], "notice"),
    ],
)
def test_bad_config_names_the_field(config: Any, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        notice_from_config(config)


def test_bad_constructor_values() -> None:
    with pytest.raises(ConfigError, match="turns or fraction"):
        NotifyWhenAtMost()
    with pytest.raises(ConfigError, match=r"NotifyWhenAtMost\.turns"):
        NotifyWhenAtMost(-2)
    with pytest.raises(ConfigError, match=r"NotifyFinalTurn\.format"):
        NotifyFinalTurn(format="free text")
    with pytest.raises(ConfigError, match=r"AnyOf\.rules"):
        AnyOf(())


def test_rules_are_frozen() -> None:
    rule = NotifyWhenAtMost(3)
    with pytest.raises(AttributeError):
        rule.turns = 4  # type: ignore[misc]
