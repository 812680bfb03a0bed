"""Bad configs fail with ConfigError naming the field; presets and files load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from budgetmix.exceptions import ConfigError
from budgetmix.training.config import PRESETS, TrainConfig, load_config, preset


def test_unknown_preset() -> None:
    with pytest.raises(ConfigError, match=r"preset.*'nope'.*known: echo-tiny"):
        preset("nope")
    with pytest.raises(ConfigError, match="preset"):
        TrainConfig.from_dict({"preset": "nope"})


@pytest.mark.parametrize("fraction", [0.0, -0.5, 1.5, float("nan")])
def test_fractions_outside_unit_interval(fraction: float) -> None:
    sampler = {"kind": "budgetmix", "ceiling": 8, "fractions": [0.5, fraction]}
    with pytest.raises(ConfigError, match=r"sampler.*fractions must lie in \(0, 1\]"):
        TrainConfig(sampler=sampler)


@pytest.mark.parametrize("ceiling", [0, -3])
def test_ceiling_below_one(ceiling: int) -> None:
    with pytest.raises(ConfigError, match=r"sampler.*ceiling"):
        TrainConfig(sampler={"kind": "budgetmix", "ceiling": ceiling})


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("group_size", 0),
        ("lr", 0.0),
        ("algorithm", "ppo"),
        ("group_budgets", "both"),
        ("notice_format", "v9"),
        ("env", "chess"),
        ("temperature", -1.0),
        ("steps", 1.5),
    ],
)
def test_bad_values_name_the_field(field: str, value: object) -> None:
    with pytest.raises(ConfigError, match=field if field != "env" else "env: unknown"):
        TrainConfig(**{field: value})  # type: ignore[arg-type]


def test_an_env_without_a_demonstrator_trains_with_rl_only() -> None:
    assert TrainConfig(env="faulty_tools", sft_steps=0).env == "faulty_tools"
    with pytest.raises(ConfigError, match="sft_steps must be 0 for env 'humaneval'"):
        TrainConfig(env="humaneval")
    with pytest.raises(ConfigError, match="env: unknown"):
        TrainConfig(env="chess", sft_steps=0)


def test_unknown_key() -> None:
    with pytest.raises(ConfigError, match=r"unknown TrainConfig field.*learning_rate"):
        TrainConfig.from_dict({"learning_rate": 1.0})


def test_presets_are_valid_and_roundtrip(tmp_path: Path) -> None:
    for name in PRESETS:
        cfg = preset(name)
        assert cfg.preset == name
        assert TrainConfig.from_dict(cfg.to_dict()) == cfg
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"preset": "echo-tiny", "steps": 3}))
    cfg = load_config(path)
    assert cfg.steps == 3 and cfg.env == "echo"
    toml = tmp_path / "c.toml"
    toml.write_text(
        'preset = "echo-tiny"\ngroup_budgets = "mixed"\n[sampler]\nkind = "fixed"\nturns = 3\n'
    )
    assert load_config(toml).budget_sampler().support() == (3,)
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.json")


def test_fixed_and_budgetmix_differ_only_in_sampler() -> None:
    a, b = preset("echo-tiny").to_dict(), preset("echo-tiny-fixed").to_dict()
    assert {k for k in a if a[k] != b[k]} == {"sampler", "preset"}
