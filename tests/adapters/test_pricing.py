"""The pricing table: lookups by exact name, date suffix and prefix; overrides; errors."""

from __future__ import annotations

import math

import pytest
from budgetmix import ConfigError
from budgetmix.adapters.pricing import DEFAULT_PRICING, ModelPrice, Pricing
from hypothesis import given
from hypothesis import strategies as st


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
    assert DEFAULT_PRICING.require("o3") == ModelPrice(2.0, 8.0, cache_read_per_mtok=0.5)


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf, True, "1"])
def test_invalid_prices_are_config_errors(bad: object) -> None:
    with pytest.raises(ConfigError, match="input_per_mtok"):
        ModelPrice(bad, 1.0)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        Pricing({"m": (1.0,)})  # type: ignore[dict-item]
    with pytest.raises(ConfigError, match="non-empty"):
        Pricing({"": (1.0, 1.0)})


def test_cache_reads_and_writes_are_priced_apart() -> None:
    # OpenAI: cached input is part of input and cheaper; no write surcharge
    assert DEFAULT_PRICING.cost("gpt-4o", 1_000_000, 0, cache_read=600_000) == pytest.approx(
        0.4 * 2.5 + 0.6 * 1.25
    )
    # Anthropic: reads at 0.1x input, 5-minute writes at 1.25x
    cost = DEFAULT_PRICING.cost(
        "claude-sonnet-4-6", 1_000_000, 0, cache_read=500_000, cache_write=200_000
    )
    assert cost == pytest.approx(0.3 * 3.0 + 0.5 * 0.3 + 0.2 * 3.75)
    # no cache price given: charged as input; tuples may carry them
    assert ModelPrice(1.0, 2.0).cost(100, 0, cache_read=100) == ModelPrice(1.0, 2.0).cost(100, 0)
    mine = Pricing({"llama3": (1.0, 2.0, 0.1, 1.5)}, defaults=False).require("llama3")
    assert mine == ModelPrice(1.0, 2.0, cache_read_per_mtok=0.1, cache_write_per_mtok=1.5)
    with pytest.raises(ConfigError, match="cache_read_per_mtok"):
        ModelPrice(1.0, 2.0, cache_read_per_mtok=-1.0)
    with pytest.raises(ConfigError, match="cache_write"):
        Pricing({"m": (1.0, 2.0, 0.1, 1.5, 9.0)})  # type: ignore[dict-item]


def test_adapters_price_cached_input_from_each_wire_format() -> None:
    from _provider_fakes import ANTHROPIC_MODEL, make_rig
    from budgetmix.adapters import budgeted
    from budgetmix.adapters import budgeted as budgeted_anthropic
    from budgetmix.adapters.testing import Reply

    pytest.importorskip("openai")
    pytest.importorskip("anthropic")
    user = [{"role": "user", "content": "hi"}]
    reply = Reply.say("ok", input_tokens=1000, output_tokens=10, cached_tokens=800)
    rig = make_rig([reply, reply, reply])
    client = budgeted(rig.openai(), rig.controller)
    with rig.controller.episode() as ep:
        client.chat.completions.create(model="gpt-4o", messages=user)
        client.responses.create(model="gpt-4o", input="hi")
        stream = client.chat.completions.create(model="gpt-4o", messages=user, stream=True)
        for _ in stream:
            pass
    per_call = (200 * 2.5 + 800 * 1.25 + 10 * 10.0) / 1e6
    assert ep.state.used["input_tokens"] == 3000
    assert ep.state.used["cost_usd"] == pytest.approx(3 * per_call)
    span = rig.spans("chat")[0]
    assert span.attributes is not None
    assert span.attributes["gen_ai.usage.cache_read.input_tokens"] == 800

    anthropic_reply = Reply.say(
        "ok", input_tokens=1000, output_tokens=10, cached_tokens=500, cache_write_tokens=300
    )
    rig = make_rig([anthropic_reply, anthropic_reply])
    client_a = budgeted_anthropic(rig.anthropic(), rig.controller)
    with rig.controller.episode() as ep:
        kw: dict[str, object] = {"model": ANTHROPIC_MODEL, "max_tokens": 64, "messages": user}
        client_a.messages.create(**kw)
        with client_a.messages.stream(**kw) as s:
            s.get_final_message()
    per_call = (200 * 3.0 + 500 * 0.3 + 300 * 3.75 + 10 * 15.0) / 1e6
    assert ep.state.used["input_tokens"] == 2000  # all input the model processed
    assert ep.state.used["cost_usd"] == pytest.approx(2 * per_call)
    span = rig.spans("chat")[0]
    assert span.attributes is not None
    assert span.attributes["gen_ai.usage.cache_creation.input_tokens"] == 300


@given(
    inp=st.integers(min_value=0, max_value=2**40),
    out=st.integers(min_value=0, max_value=2**40),
    prices=st.tuples(*[st.floats(min_value=0, max_value=1000)] * 4),
)
def test_uncached_calls_cost_the_same_as_the_general_formula(
    inp: int, out: int, prices: tuple[float, float, float, float]
) -> None:
    # calls without cache tokens skip the zero terms: the result must not change
    price = ModelPrice(*prices)
    general = (inp * prices[0] + 0 * prices[2] + 0 * prices[3] + out * prices[1]) / 1e6
    assert price.cost(inp, out) == general
    assert price.cost(inp, out, cache_read=0, cache_write=0) == general
