"""Grouped-query attention with the query heads folded: the same attention as repeating K/V.

The reference repeats every key/value head for its query heads and applies the
mask as an additive -inf, in float64 (transformers' eager attention, written out).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
from budgetmix.training.data.models import TinyModelSpec, build_tiny_model
from budgetmix.training.rollouts.attention import (
    GROUPED_SDPA,
    grouped_attention,
    grouped_sdpa_attention,
)

BATCH, HEADS, KV_HEADS, DIM = 3, 8, 2, 16


def _reference(q: Any, k: Any, v: Any, allowed: Any) -> Any:
    """softmax(q k^T / sqrt(d) + mask) v with K/V repeated per query head; [b, q, heads, d]."""
    groups = q.shape[1] // k.shape[1]
    k, v = (t.double().repeat_interleave(groups, dim=1) for t in (k, v))
    scores = q.double() @ k.transpose(-1, -2) / DIM**0.5
    scores = scores.masked_fill(~allowed, float("-inf"))
    return (scores.softmax(-1) @ v).transpose(1, 2)


def _mask(length: int, width: int, padded: bool) -> torch.Tensor:
    """[batch, 1, length, width] bool: causal for the last ``length`` columns, with (when
    ``padded``) masked columns in the middle of row 1 and at the start of row 2."""
    offset = width - length
    causal = torch.arange(width)[None, :] <= torch.arange(length)[:, None] + offset
    keep = torch.ones(BATCH, width, dtype=torch.bool)
    if padded:
        keep[1, 3:7] = False
        keep[2, :2] = False
    return causal[None, None] & keep[:, None, None, :]


@pytest.mark.parametrize("length", [1, 5], ids=["one-id", "several-ids"])
@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "padded"])
def test_folded_heads_attend_like_repeated_heads(length: int, padded: bool) -> None:
    gen = torch.Generator().manual_seed(0)
    width = 12
    q = torch.randn(BATCH, HEADS, length, DIM, generator=gen)
    k = torch.randn(BATCH, KV_HEADS, width, DIM, generator=gen)
    v = torch.randn(BATCH, KV_HEADS, width, DIM, generator=gen)
    module = SimpleNamespace(num_key_value_groups=HEADS // KV_HEADS, is_causal=True)
    allowed = _mask(length, width, padded)
    # what transformers passes: no mask for one id without padding, else the 4D mask
    given = None if (length == 1 and not padded) else allowed
    out, weights = grouped_sdpa_attention(module, q, k, v, given, scaling=DIM**-0.5)
    assert weights is None
    assert out.shape == (BATCH, length, HEADS, DIM)
    torch.testing.assert_close(out.double(), _reference(q, k, v, allowed), atol=1e-5, rtol=0)


def test_cases_it_does_not_fold_go_to_transformers_sdpa() -> None:
    """No grouping, or several ids without a mask (a prompt on an empty cache: is_causal)."""
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(BATCH, HEADS, 6, DIM, generator=gen)
    grouped = SimpleNamespace(num_key_value_groups=HEADS // KV_HEADS, is_causal=True)
    k = torch.randn(BATCH, KV_HEADS, 6, DIM, generator=gen)
    v = torch.randn(BATCH, KV_HEADS, 6, DIM, generator=gen)
    out, _ = grouped_sdpa_attention(grouped, q, k, v, None, scaling=DIM**-0.5)
    torch.testing.assert_close(
        out.double(), _reference(q, k, v, _mask(6, 6, False)), atol=1e-5, rtol=0
    )
    plain = SimpleNamespace(num_key_value_groups=1, is_causal=True)
    k = torch.randn(BATCH, HEADS, 10, DIM, generator=gen)
    v = torch.randn(BATCH, HEADS, 10, DIM, generator=gen)
    mask = _mask(6, 10, True)
    out, _ = grouped_sdpa_attention(plain, q, k, v, mask, scaling=DIM**-0.5)
    torch.testing.assert_close(out.double(), _reference(q, k, v, mask), atol=1e-5, rtol=0)


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, bool]]:
    """Record (ids fed, mask given) for every call of the registered grouped function."""
    from transformers import AttentionInterface

    calls: list[tuple[int, bool]] = []

    def counted(module: Any, q: Any, k: Any, v: Any, mask: Any, **kw: Any) -> Any:
        calls.append((int(q.shape[2]), mask is not None))
        return grouped_sdpa_attention(module, q, k, v, mask, **kw)

    from budgetmix.training.rollouts import attention
    attention._register()
    monkeypatch.setitem(AttentionInterface._global_mapping, GROUPED_SDPA, counted)
    return calls


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_the_sampler_runs_grouped_layers_folded_and_restores_sdpa(
    arch: str, tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from budgetmix.training.rollouts.generation import ModelGenerator

    model = build_tiny_model(TinyModelSpec(arch=arch, num_heads=4, num_kv_heads=2), tokenizer)
    assert model.config._attn_implementation == "sdpa"
    calls = _counting(monkeypatch)
    gen = ModelGenerator(model, pad_token_id=0, stop_token_ids=[1], temperature=0.0)
    first = gen.generate_ids([[5, 6, 7, 8], [9, 10]], 3, [0, 1])
    gen.generate_ids([[5, 6, 7, 8, *first[0].ids, 20, 21], [9, 10, *first[1].ids, 22]], 3, [0, 1])
    layers = model.config.num_hidden_layers
    assert (1, True) in calls, "one id per row with a padding mask"
    assert (3, True) in calls, "the reply fed after a padded cache: several ids, masked"
    assert len(calls) == layers * (3 + 3)  # every layer of every forward pass
    assert model.config._attn_implementation == "sdpa"
    with pytest.raises(IndexError), grouped_attention(model) as switched:
        assert switched and model.config._attn_implementation == GROUPED_SDPA
        raise IndexError
    assert model.config._attn_implementation == "sdpa"


def test_models_without_grouped_sdpa_layers_are_left_alone(tokenizer: Any) -> None:
    full_heads = build_tiny_model(TinyModelSpec(num_heads=4, num_kv_heads=4), tokenizer)
    with grouped_attention(full_heads) as switched:
        assert not switched and full_heads.config._attn_implementation == "sdpa"
    eager = build_tiny_model(TinyModelSpec(), tokenizer)
    eager.config._attn_implementation = "eager"
    with grouped_attention(eager) as switched:
        assert not switched and eager.config._attn_implementation == "eager"
