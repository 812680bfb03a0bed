"""The pricing table: lookups by exact name, date suffix and prefix; overrides; errors."""

from __future__ import annotations

import math

import pytest
from budgetmix import ConfigError
from budgetmix.adapters.pricing import DEFAULT_PRICING, ModelPrice, Pricing


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("gpt-4o", "gpt-4o"),
        ("gpt-4o-2024-08-06", "gpt-4o"),
        ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"),
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
        ("claude-opus-4-1", "claude-opus-4"),
        ("claude-3-5-haiku-latest", "claude-3-5-haiku"),
    ],
)
def test_lookup_matches_snapshots_and_families(model: str, expected: str) -> None:
    assert DEFAULT_PRICING.lookup(model) == DEFAULT_PRICING.lookup(expected) is not None


def test_prefix_matches_only_at_dash_boundaries_and_unknowns_are_none() -> None:
    assert DEFAULT_PRICING.lookup("gpt-4oo") is None
    assert DEFAULT_PRICING.lookup("gpt-5.9-ultra") is None
    assert DEFAULT_PRICING.lookup(None) is None
    assert DEFAULT_PRICING.cost("llama3", 10, 10) is None
    assert "gpt-4o" in DEFAULT_PRICING and "llama3" not in DEFAULT_PRICING


def test_cost_is_per_million_tokens() -> None:
    assert DEFAULT_PRICING.cost("gpt-4o", 1_000_000, 1_000_000) == pytest.approx(12.5)
    assert ModelPrice(1.0, 2.0).cost(500_000, 250_000) == pytest.approx(1.0)


def test_overrides_merge_over_the_defaults() -> None:
    mine = Pricing({"llama3": (0.1, 0.2), "gpt-4o": ModelPrice(1.0, 1.0)})
    assert mine.cost("llama3-8b", 1_000_000, 0) == pytest.approx(0.1)
    assert mine.cost("gpt-4o", 1_000_000, 0) == pytest.approx(1.0)
    assert mine.lookup("claude-sonnet-4-6") is not None
    only = Pricing({"llama3": (0.1, 0.2)}, defaults=False)
    assert only.models() == ["llama3"]
    merged = only.merge({"qwen": (0.0, 0.0)}).merge(Pricing({"x": (1, 1)}, defaults=False))
    assert merged.models() == ["llama3", "qwen", "x"] and only.models() == ["llama3"]


def test_require_names_the_model_and_the_fix() -> None:
    with pytest.raises(ConfigError, match=r"no price known for 'llama3'.*Pricing\("):
        DEFAULT_PRICING.require("llama3")
    assert DEFAULT_PRICING.require("o3") == ModelPrice(2.0, 8.0)


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf, True, "1"])
def test_invalid_prices_are_config_errors(bad: object) -> None:
    with pytest.raises(ConfigError, match="input_per_mtok"):
        ModelPrice(bad, 1.0)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        Pricing({"m": (1.0,)})  # type: ignore[dict-item]
    with pytest.raises(ConfigError, match="non-empty"):
        Pricing({"": (1.0, 1.0)})
