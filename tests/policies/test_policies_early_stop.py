"""Early-stop rules end real episodes with status early_stopped and their reason."""

from __future__ import annotations

from typing import Any

import pytest
from budgetmix import Budget, BudgetController, ConfigError, EarlyStopped, MistakeKind
from budgetmix.policies import (
    AnyOf,
    EarlyStopRule,
    StopOnRepeatedMistakes,
    StopWithoutProgress,
    early_stop_from_config,
)


def run(rule: EarlyStopRule, script: list[str], **kwargs: Any) -> Any:
    """One step per turn: "ok", "progress" or a mistake kind."""
    controller = BudgetController(Budget(turns=len(script) + 1), early_stop=rule, **kwargs)
    with controller.episode() as ep:
        for turn in ep.turns():
            if turn.number > len(script):
                ep.finish(success=True)
                break
            step = script[turn.number - 1]
            if step in ("ok", "progress"):
                ep.record_step(ok=True, progress=step == "progress")
            else:
                ep.record_mistake(step)
    return ep.result


def test_repeated_mistakes_stops_the_episode() -> None:
    result = run(StopOnRepeatedMistakes(3), ["tool_error"] * 5)
    assert result.status == "early_stopped"
    assert result.stop_reason == "repeated_mistakes: 3 consecutive tool_error"
    assert result.used["turns"] == 3
    assert [e.kind for e in result.events] == ["early_stop"]


def test_mixed_kinds_or_a_success_do_not_count_as_repeated() -> None:
    mixed = ["tool_error", "unknown_tool", "tool_error", "unknown_tool"]
    assert run(StopOnRepeatedMistakes(2), mixed).status == "success"
    broken = ["tool_error", "tool_error", "ok", "tool_error", "tool_error"]
    assert run(StopOnRepeatedMistakes(3), broken).status == "success"


def test_repeated_mistakes_of_one_kind_only() -> None:
    rule = StopOnRepeatedMistakes(2, mistake="unknown_tool")
    assert rule.mistake is MistakeKind.UNKNOWN_TOOL
    assert run(rule, ["tool_error"] * 3).status == "success"
    result = run(rule, ["tool_error", "unknown_tool", "unknown_tool", "ok"])
    assert result.status == "early_stopped" and result.used["turns"] == 3


def test_no_progress_stops_after_n_turns() -> None:
    result = run(StopWithoutProgress(turns=2), ["progress", "ok", "ok", "ok"])
    assert result.status == "early_stopped"
    assert result.stop_reason == "no_progress: 2 turns"
    assert result.used["turns"] == 3
    assert run(StopWithoutProgress(turns=2), ["progress", "ok", "progress", "ok"]).status == (
        "success"
    )


def test_or_composes_and_the_first_reason_wins() -> None:
    rule = StopOnRepeatedMistakes(2) | StopWithoutProgress(turns=2)
    assert isinstance(rule, AnyOf) and len(rule.rules) == 2
    result = run(rule, ["tool_error", "tool_error", "ok"])
    assert result.stop_reason == "repeated_mistakes: 2 consecutive tool_error"
    result = run(rule, ["ok", "tool_error", "ok"])
    assert result.stop_reason == "no_progress: 2 turns"


def test_begin_turn_raises_early_stopped_which_the_episode_records() -> None:
    controller = BudgetController(Budget(turns=5), early_stop=StopOnRepeatedMistakes(1))
    with controller.episode() as ep:
        ep.begin_turn()
        ep.record_mistake("tool_error")
        with pytest.raises(EarlyStopped):
            ep.begin_turn()
    assert ep.result is not None and ep.result.status == "early_stopped"


@pytest.mark.parametrize(
    "rule",
    [
        StopOnRepeatedMistakes(4),
        StopOnRepeatedMistakes(2, mistake="provider_error"),
        StopWithoutProgress(turns=6),
        StopOnRepeatedMistakes() | StopWithoutProgress(),
    ],
)
def test_config_round_trip(rule: EarlyStopRule) -> None:
    assert early_stop_from_config(rule.to_config()) == rule


def test_config_shorthands() -> None:
    assert early_stop_from_config(None) is None
    assert early_stop_from_config("off") is None
    assert early_stop_from_config("no_progress") == StopWithoutProgress()


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"kind": "never"}, "early_stop.kind"),
        ({"kind": "repeated_mistakes", "n": -1}, "early_stop.n"),
        ({"kind": "repeated_mistakes", "n": 0}, "early_stop.n"),
        ({"kind": "repeated_mistakes", "mistake": "typo"}, "early_stop.mistake"),
        ({"kind": "repeated_mistakes", "turns": 3}, "turns"),
        ({"kind": "no_progress", "turns": -2}, "early_stop.turns"),
        ({"kind": "no_progress", "turns": "2"}, "early_stop.turns"),
        ({"kind": "any", "of": [{"kind": "no_progress", "turns": 0}]}, r"early_stop.of\[0\].turns"),
        ({"kind": "any"}, "early_stop.of"),
    ],
)
def test_bad_config_names_the_field(config: Any, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        early_stop_from_config(config)


def test_bad_constructor_values() -> None:
    with pytest.raises(ConfigError, match=r"StopOnRepeatedMistakes\.n"):
        StopOnRepeatedMistakes(0)
    with pytest.raises(ConfigError, match=r"StopOnRepeatedMistakes\.mistake"):
        StopOnRepeatedMistakes(2, mistake="oops")
    with pytest.raises(ConfigError, match=r"StopWithoutProgress\.turns"):
        StopWithoutProgress(turns=-1)
    with pytest.raises(ConfigError, match=r"AnyOf\.rules"):
        AnyOf(())
