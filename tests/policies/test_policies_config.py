"""The config bundle: exhaustion modes, round trips, controller kwargs, bad configs."""

from __future__ import annotations

import json
from typing import Any

import pytest
from budgetmix import Budget, BudgetController, BudgetExhausted, ConfigError
from budgetmix.policies import (
    COUNT_RETRIES,
    DEFAULT_EXHAUSTION,
    EXHAUSTION_MODES,
    REQUEST_MORE_TURNS,
    BudgetMix,
    ExtendOnDemand,
    ExtendOnProgress,
    NotifyEveryTurn,
    NotifyFinalTurn,
    NotifyWhenAtMost,
    PolicyConfig,
    StopOnRepeatedMistakes,
    StopWithoutProgress,
    build_controller_kwargs,
    exhaustion_from_config,
    policy_from_config,
)

FULL = {
    "notice": {"kind": "any", "of": [{"kind": "at_most", "turns": 3}, {"kind": "final_turn"}]},
    "exhaustion": "grace",
    "extension": {"kind": "progress", "turns": 2, "once": True, "lookback": 3},
    "early_stop": {"kind": "repeated_mistakes", "n": 3},
    "sampler": {"kind": "budgetmix", "ceiling": 8},
    "accounting": "count_retries",
}


def test_exhaustion_modes() -> None:
    assert EXHAUSTION_MODES == ("end", "raise", "grace") and DEFAULT_EXHAUSTION == "end"
    assert exhaustion_from_config(None) == "end"
    for mode in EXHAUSTION_MODES:
        assert exhaustion_from_config(mode) == mode
    for bad in ("stop", "", 1, True, ["end"]):
        with pytest.raises(ConfigError, match="exhaustion"):
            exhaustion_from_config(bad)


@pytest.mark.parametrize(("mode", "turns_seen"), [("end", 2), ("grace", 3)])
def test_exhaustion_through_the_controller(mode: str, turns_seen: int) -> None:
    controller = BudgetController(Budget(turns=2), **build_controller_kwargs({"exhaustion": mode}))
    with controller.episode() as ep:
        seen = [turn.grace for turn in ep.turns()]
    assert len(seen) == turns_seen
    assert ep.result is not None and ep.result.status == "budget_exhausted"


def test_exhaustion_raise_through_the_controller() -> None:
    controller = BudgetController(
        Budget(turns=1), **build_controller_kwargs({"exhaustion": "raise"})
    )
    with pytest.raises(BudgetExhausted), controller.episode() as ep:
        ep.begin_turn()
        ep.begin_turn()


def test_full_bundle() -> None:
    bundle = policy_from_config(FULL)
    assert bundle.notice == NotifyWhenAtMost(3) | NotifyFinalTurn()
    assert bundle.exhaustion == "grace"
    assert bundle.extension == ExtendOnProgress()
    assert bundle.early_stop == StopOnRepeatedMistakes(3)
    assert bundle.sampler == BudgetMix(ceiling=8)
    assert bundle.accounting is COUNT_RETRIES
    assert PolicyConfig.from_config(json.loads(json.dumps(bundle.to_config()))) == bundle
    kwargs = build_controller_kwargs(FULL)
    assert set(kwargs) == {"notice", "exhaustion", "extension", "early_stop", "accounting"}
    BudgetController(Budget(turns=4), **kwargs)


def test_defaults() -> None:
    bundle = policy_from_config({})
    assert bundle == PolicyConfig() == policy_from_config(None)
    assert bundle.notice == NotifyEveryTurn()
    assert bundle.to_config() == {
        "notice": {"kind": "every_turn", "format": "v1", "placement": "ephemeral"},
        "exhaustion": "end",
        "extension": None,
        "early_stop": None,
        "sampler": None,
        "accounting": "default",
    }
    assert policy_from_config(bundle.to_config()) == bundle


def test_on_demand_bundle_makes_the_request_tool_free() -> None:
    bundle = PolicyConfig(extension=ExtendOnDemand(step=3) | ExtendOnProgress())
    kwargs = bundle.controller_kwargs()
    assert REQUEST_MORE_TURNS in kwargs["accounting"].refunded_tools
    assert REQUEST_MORE_TURNS not in bundle.accounting.refunded_tools
    assert build_controller_kwargs(bundle) == kwargs


def test_bundle_drives_an_episode() -> None:
    controller = BudgetController(
        Budget(turns=3),
        **build_controller_kwargs(
            {"notice": "final_turn", "early_stop": {"kind": "no_progress", "turns": 2}}
        ),
    )
    with controller.episode() as ep:
        notices = []
        for turn in ep.turns():
            notices.append(turn.notice)
            ep.record_step(ok=True)
    assert notices == [None, None]
    assert ep.result is not None and ep.result.stop_reason == "no_progress: 2 turns"


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"notices": {}}, "notices"),
        ({"notice": {"kind": "loud"}}, "notice.kind"),
        ({"exhaustion": "crash"}, "exhaustion"),
        ({"extension": {"kind": "progress", "turns": -1}}, "extension.turns"),
        ({"early_stop": {"kind": "no_progress", "turns": -5}}, "early_stop.turns"),
        ({"sampler": {"kind": "uniform"}}, "sampler"),
        ({"sampler": {"kind": "budgetmix", "ceiling": -1}}, "sampler"),
        ({"sampler": {"kind": "budgetmix", "ceiling": 4, "fractions": "ab"}}, "sampler"),
        ({"sampler": {"kind": "fixed"}}, "sampler"),
        ({"sampler": "fixed"}, "sampler"),
        ({"accounting": "cheap"}, "accounting"),
        ("notice", "policies"),
    ],
)
def test_bad_bundle_names_the_field(config: Any, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        policy_from_config(config)


def test_bundle_type_checks() -> None:
    with pytest.raises(ConfigError, match=r"PolicyConfig\.notice"):
        PolicyConfig(notice="every_turn")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"PolicyConfig\.early_stop"):
        PolicyConfig(early_stop=StopWithoutProgress)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"PolicyConfig\.exhaustion"):
        PolicyConfig(exhaustion="boom")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"PolicyConfig\.sampler"):
        PolicyConfig(sampler=8)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "sampler",
    [
        {"kind": "fixed", "turns": 6},
        {"kind": "budgetmix", "ceiling": 10, "fractions": [0.5, 1.0], "weights": [1.0, 3.0]},
        {"kind": "percentile", "observed_turns": [3, 5, 9, 12], "percentile": 75.0},
    ],
)
def test_sampler_round_trip_through_the_bundle(sampler: dict[str, Any]) -> None:
    bundle = policy_from_config({"sampler": sampler})
    assert bundle.sampler is not None
    assert policy_from_config(bundle.to_config()) == bundle
