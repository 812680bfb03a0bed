"""Grouped-query attention over a KV cache without copying the cache once per query head.

transformers' ``sdpa`` integration handles grouped-query attention (fewer key/value
heads than query heads) in one of three ways: ``enable_gqa=True`` when there is no
mask (on CPU about twice as slow per decoding step as the way below), folding the
query heads when one id is fed with a mask, and otherwise ``repeat_kv``: a copy of
the whole cache, once per query head, in every layer. A turn of a rollout with a
kept cache feeds several ids (the environment's reply) after a long context with a
padding mask, so it took the copy.

:func:`grouped_sdpa_attention` always folds: the query heads that share a key/value
head become rows of one query block (``[batch, kv_heads, groups * q, dim]``), the mask
is repeated to match, and one SDPA call reads the cache as stored. Each query row
meets the same keys, values and mask as before. Cases it does not cover (no grouping,
per-head masks, position biases, soft-capping, attention sinks, several ids without a
mask) go to transformers' own ``sdpa`` function.

:func:`grouped_attention` switches a model's ``sdpa`` layers to it for the length
of a ``with`` block (the sampler's calls), and back.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

__all__ = ["GROUPED_SDPA", "grouped_attention", "grouped_sdpa_attention"]

#: The name the attention function is registered under with transformers.
GROUPED_SDPA = "budgetmix_grouped_sdpa"

#: Keyword arguments that change what attention computes; with any of them set, the
#: call goes to transformers' own function.
_UNFOLDED = ("position_bias", "softcap", "s_aux", "sinks")


def _foldable(module: Any, query: torch.Tensor, key: torch.Tensor, mask: Any, kwargs: Any) -> bool:
    groups = int(getattr(module, "num_key_value_groups", 1))
    if groups < 2 or key.shape[1] * groups != query.shape[1]:
        return False
    if any(kwargs.get(name) is not None for name in _UNFOLDED):
        return False
    if mask is None:  # without a mask only one id is causal-free; several need is_causal
        return int(query.shape[2]) == 1
    return isinstance(mask, torch.Tensor) and mask.dim() == 4 and mask.shape[1] == 1


def grouped_sdpa_attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """SDPA with the query heads of each key/value head folded into one block (an
    ``AttentionInterface`` function: ``[batch, heads, q, dim]`` queries, ``[batch,
    kv_heads, kv, dim]`` keys and values, a ``[batch|1, 1, q, kv]`` mask or ``None``);
    returns ``([batch, q, heads, dim], None)`` like transformers' ``sdpa``."""
    if not _foldable(module, query, key, attention_mask, kwargs):
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        out: tuple[torch.Tensor, None] = sdpa_attention_forward(
            module,
            query,
            key,
            value,
            attention_mask,
            dropout=dropout,
            scaling=scaling,
            is_causal=is_causal,
            **kwargs,
        )
        return out
    batch, heads, length, _ = query.shape
    kv_heads = key.shape[1]
    groups = heads // kv_heads
    # heads h = k * groups + g share key/value head k (transformers' repeat_kv order)
    folded = query.reshape(batch, kv_heads, groups * length, query.shape[-1])
    mask = attention_mask
    if mask is not None and length > 1:  # row g * length + i of the block is query i
        rows, width = mask.shape[0], mask.shape[-1]
        mask = mask[:, :, None].expand(rows, 1, groups, length, width)
        mask = mask.reshape(rows, 1, groups * length, width)
    attn = torch.nn.functional.scaled_dot_product_attention(
        folded, key, value, attn_mask=mask, dropout_p=dropout, scale=scaling
    )
    attn = attn.reshape(batch, heads, length, value.shape[-1]).transpose(1, 2).contiguous()
    return attn, None


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    if GROUPED_SDPA not in AttentionInterface._global_mapping:
        AttentionInterface.register(GROUPED_SDPA, grouped_sdpa_attention)
        AttentionMaskInterface.register(GROUPED_SDPA, sdpa_mask)  # the masks sdpa gets


def _grouped_sdpa_configs(model: Any) -> list[Any]:
    """The configs of ``model``'s grouped-query attention layers that run ``sdpa`` (configs
    with sub-configs are left alone: setting one would set theirs)."""
    configs: dict[int, Any] = {}
    modules = model.modules() if isinstance(model, torch.nn.Module) else ()
    for module in modules:
        config = getattr(module, "config", None)
        if (
            int(getattr(module, "num_key_value_groups", 1) or 1) > 1
            and getattr(config, "_attn_implementation", None) == "sdpa"
            and not getattr(config, "sub_configs", None)
        ):
            configs[id(config)] = config
    return list(configs.values())


@contextmanager
def grouped_attention(model: Any) -> Iterator[bool]:
    """Run ``model``'s grouped-query ``sdpa`` layers through :func:`grouped_sdpa_attention`
    inside the block (yields whether any layer was switched); ``sdpa`` again after it,
    also when the block raises. A model with another attention implementation, or
    without grouped-query layers, is left as it is. A forward pass of another thread
    meanwhile computes the same attention through either function (only its speed
    depends on which)."""
    configs = _grouped_sdpa_configs(model)
    if configs:
        _register()
    for config in configs:
        config._attn_implementation = GROUPED_SDPA
    try:
        yield bool(configs)
    finally:
        for config in configs:
            config._attn_implementation = "sdpa"
