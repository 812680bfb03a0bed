"""Batched sampling that keeps each episode's KV cache from one turn to the next.

A multi-turn rollout re-reading its whole context every turn costs
quadratically in the number of turns. :class:`KVCacheSampler` keeps one
:class:`transformers.DynamicCache` per batch of episodes (one row per
episode) across calls: the next call for an episode feeds only the ids its
cache has not seen (the environment's message and the next generation
prompt). When the new context is not an extension of what the row holds
(ephemeral content removed, another episode), the row is rewound to the
longest common prefix and the rest is fed.

Rows of one batch differ in how many new ids they get, so each forward pass
pads *in the middle* (between a row's cached columns and its new ids) with
attention mask 0 and explicit position ids; a row's position is the number
of ids it really holds, as in a single left-padded forward of its context.
Inside a generation, a row that has stopped is fed nothing (mask 0), so its
post-stop padding never reaches a later turn. Masked columns accumulate
(padding, rewinds, stopped rows); when they are more than half of the cache,
each row's live columns are gathered together (amortised linear cost). The
cache layers write new ids into a buffer grown by doubling rather than
concatenating (which would copy the whole cache at every sampled id). While
sampling, grouped-query ``sdpa`` layers fold their query heads instead of copying
the cache once per head (:mod:`budgetmix.training.rollouts.attention`), and the model
computes logits for the last position only (``logits_to_keep=1``).

Requests without an episode key (``None``) are re-read from scratch, exactly
the path before caching: the cache of such a batch is dropped after the call.
Caches of episodes absent from a call are dropped; :meth:`KVCacheSampler.reset`
drops them all (a cache is only valid for the weights that computed it).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from budgetmix.exceptions import ConfigError
from budgetmix.training.rollouts.attention import grouped_attention

__all__ = ["Generation", "KVCacheSampler", "SamplingRule", "common_prefix", "stop_token_ids"]

#: Cache columns kept without compaction, whatever the fraction of masked ones.
_COMPACT_SLACK = 64


@dataclass(frozen=True, slots=True)
class Generation:
    """Sampled ids (including the stop id when ``stopped``) and one log-prob per id.

    ``imitate`` is False for a scripted demonstrator's injected error: the reply is
    executed (the episode goes on from where it leads) but the loss does not learn
    it (its ids are 0 in the rollout's ``response_mask``).
    """

    ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    stopped: bool
    imitate: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class SamplingRule:
    """How the next id is drawn and what ends a response.

    ``temperature`` scales logits before sampling and the recorded log-probs
    are of that tempered distribution; ``0`` decodes greedily. ``generator``
    makes sampling reproducible. A response stops at any of ``stop_ids``.

    Raises:
        ConfigError: no stop id, or a negative temperature.
    """

    stop_ids: frozenset[int]
    pad_id: int
    temperature: float = 1.0
    generator: torch.Generator | None = None

    def __post_init__(self) -> None:
        if not self.stop_ids:
            raise ConfigError("stop_token_ids: at least one id must end a response")
        if self.temperature < 0:
            raise ConfigError(f"temperature must be >= 0, got {self.temperature!r}")


def stop_token_ids(model: Any, tokenizer: Any) -> tuple[int, ...]:
    """Every id that ends a response: the model's ``generation_config`` EOS id(s), then the
    tokenizer's EOS (duplicates dropped, order kept)."""
    found: list[int] = []
    config = getattr(model, "generation_config", None)
    eos = getattr(config, "eos_token_id", None)
    for value in (*(eos if isinstance(eos, list | tuple) else [eos]), tokenizer.eos_token_id):
        if value is not None and int(value) not in found:
            found.append(int(value))
    return tuple(found)


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of ``a`` and ``b``."""
    n = min(len(a), len(b))
    if list(a[:n]) == list(b[:n]):  # the usual case, a C-speed comparison
        return n
    low, high = 0, n  # a[:low] == b[:low] and a[:high] != b[:high]
    while high - low > 1:
        mid = (low + high) // 2
        if list(a[:mid]) == list(b[:mid]):
            low = mid
        else:
            high = mid
    return low


def _growing_layer() -> Any:
    """A full-attention cache layer whose keys and values live in a buffer grown by doubling:
    appending a few ids writes them in place (``DynamicLayer`` concatenates, copying the
    whole cache at every id)."""
    from transformers.cache_utils import DynamicLayer

    base: Any = DynamicLayer  # transformers' layers are untyped

    class GrowingLayer(base):  # type: ignore[misc]
        length = 0
        buffers: tuple[Any, Any]

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> Any:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
                self.buffers = (key_states[..., :0, :], value_states[..., :0, :])
                self.length = 0
            end = self.length + key_states.shape[-2]
            if end > self.buffers[0].shape[-2]:
                self.buffers = (
                    _grown(self.buffers[0], key_states, self.length, end),
                    _grown(self.buffers[1], value_states, self.length, end),
                )
            self.buffers[0][..., self.length : end, :] = key_states
            self.buffers[1][..., self.length : end, :] = value_states
            self.length = end
            self.keys, self.values = (b[..., :end, :] for b in self.buffers)
            return self.keys, self.values

        def replace(self, keys: Any, values: Any) -> None:
            self.buffers = (keys.contiguous(), values.contiguous())
            self.length = keys.shape[-2]
            self.keys, self.values = self.buffers

        def batch_select_indices(self, indices: Any) -> None:
            if self.is_initialized:
                self.replace(self.keys[indices], self.values[indices])

    return GrowingLayer()


def _grown(buffer: torch.Tensor, like: torch.Tensor, length: int, end: int) -> torch.Tensor:
    """A buffer for at least ``end`` columns (twice the old size), holding the first
    ``length`` columns of ``buffer``."""
    capacity = max(end, 2 * buffer.shape[-2], _COMPACT_SLACK)
    out = like.new_empty((*like.shape[:-2], capacity, like.shape[-1]))
    out[..., :length, :] = buffer[..., :length, :]
    return out


def _last_logits_only(model: Any) -> dict[str, int]:
    """``logits_to_keep=1`` when ``model``'s forward takes it: the logits of the last position
    only (the others would cost ``ids x vocabulary`` each), else nothing."""
    import inspect

    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # peft
    try:
        params = inspect.signature(base.forward).parameters
    except (TypeError, ValueError):
        return {}
    return {"logits_to_keep": 1} if "logits_to_keep" in params else {}


def _reusable(cache: Any) -> bool:
    """Only full-attention layers keep every column, so only they can be rewound and gathered."""
    return all(hasattr(layer, "replace") for layer in cache.layers)


class _CacheRows:
    """One KV cache holding several episodes, one row each, and what each row holds."""

    def __init__(self, model: Any, keys: list[Hashable | None]) -> None:
        from transformers import DynamicCache
        from transformers.cache_utils import DynamicLayer

        self.model = model
        self.device = next(model.parameters()).device
        self.cache: Any = DynamicCache(config=model.config)
        if all(type(layer) is DynamicLayer for layer in self.cache.layers):
            self.cache.layers = [_growing_layer() for _ in self.cache.layers]
        self.keys = keys
        self.valid = torch.zeros((len(keys), 0), dtype=torch.long, device=self.device)
        self.fed: list[list[int]] = [[] for _ in keys]  # the ids each row holds, in order
        self.cols: list[list[int]] = [[] for _ in keys]  # the cache column of each of them
        self.ids_fed = 0  # ids run through the model (padding excluded)
        self.logits_kwargs = _last_logits_only(model)

    @property
    def width(self) -> int:
        """Columns in the cache (live or masked)."""
        return int(self.valid.shape[1])

    def keep(self, rows: Sequence[int]) -> None:
        """Keep only ``rows`` (in this order); the others' caches are freed."""
        if list(rows) == list(range(len(self.keys))):
            return
        index = torch.tensor(rows, dtype=torch.long, device=self.device)
        self.cache.batch_select_indices(index)
        self.valid = self.valid[index]
        self.keys = [self.keys[r] for r in rows]
        self.fed = [self.fed[r] for r in rows]
        self.cols = [self.cols[r] for r in rows]

    def rewind(self, row: int, length: int) -> None:
        """Forget what ``row`` holds after its first ``length`` ids (their columns are masked)."""
        dropped = self.cols[row][length:]
        if dropped:
            self.valid[row, torch.tensor(dropped, device=self.device)] = 0
        del self.cols[row][length:], self.fed[row][length:]

    def feed(self, new: Sequence[Sequence[int]]) -> torch.Tensor:
        """Append ``new[row]`` to each row (right-aligned, padded in the middle); returns the
        logits after each row's last id (``[rows, vocab]``; garbage for a row fed nothing)."""
        rows, width = len(new), max(len(ids) for ids in new)
        ids = torch.zeros((rows, width), dtype=torch.long)
        live = torch.zeros((rows, width), dtype=torch.long)
        positions = torch.zeros((rows, width), dtype=torch.long)
        start = self.width
        for row, row_ids in enumerate(new):
            n = len(row_ids)
            if not n:
                continue
            held = len(self.fed[row])
            ids[row, width - n :] = torch.tensor(row_ids, dtype=torch.long)
            live[row, width - n :] = 1
            positions[row, width - n :] = torch.arange(held, held + n)
            self.fed[row].extend(row_ids)
            self.ids_fed += n
            self.cols[row].extend(range(start + width - n, start + width))
        self.valid = torch.cat([self.valid, live.to(self.device)], dim=1)
        result = self.model(
            input_ids=ids.to(self.device),
            attention_mask=self.valid,
            position_ids=positions.to(self.device),
            cache=self.cache,
            use_cache=True,
            **self.logits_kwargs,
        )
        logits: torch.Tensor = result.logits[:, -1, :]
        return logits

    def compact(self) -> None:
        """Gather each row's live columns together when masked ones are over half the cache."""
        held = max((len(c) for c in self.cols), default=0)
        if self.width <= 2 * held + _COMPACT_SLACK:
            return
        index = torch.zeros((len(self.cols), held), dtype=torch.long)
        valid = torch.zeros((len(self.cols), held), dtype=torch.long)
        for row, cols in enumerate(self.cols):
            n = len(cols)
            if n:
                index[row, held - n :] = torch.tensor(cols, dtype=torch.long)
                valid[row, held - n :] = 1
            self.cols[row] = list(range(held - n, held))
        index = index.to(self.device)
        for layer in self.cache.layers:
            if not layer.is_initialized:
                continue
            gather = index[:, None, :, None].expand(
                -1, layer.keys.shape[1], -1, layer.keys.shape[3]
            )
            layer.replace(layer.keys.gather(2, gather), layer.values.gather(2, gather))
        self.valid = valid.to(self.device)


def _draw(logits: torch.Tensor, rule: SamplingRule) -> tuple[list[int], list[float]]:
    """One id per row and its log-prob under the (tempered) distribution."""
    if rule.temperature == 0.0:  # greedy decoding (serving, evaluation)
        logp = torch.log_softmax(logits.float(), dim=-1)
        tok = logp.argmax(dim=-1)
    else:
        logp = torch.log_softmax(logits.float() / rule.temperature, dim=-1)
        tok = torch.multinomial(logp.exp().cpu(), 1, generator=rule.generator)
        tok = tok.to(logp.device).squeeze(-1)
    chosen = logp.gather(-1, tok[:, None]).squeeze(-1)
    return [int(t) for t in tok.tolist()], [float(x) for x in chosen.tolist()]


def _decode(
    rows: _CacheRows, new: Sequence[Sequence[int]], max_new_tokens: int, rule: SamplingRule
) -> list[Generation]:
    """Feed ``new`` to each row, then sample up to ``max_new_tokens`` ids per row.

    The last id a row samples is not fed (the next call feeds it with the
    environment's reply), nor is anything after a stop id.
    """
    logits = rows.feed(new)
    sampled: list[list[int]] = [[] for _ in new]
    logps: list[list[float]] = [[] for _ in new]
    done = [False] * len(new)
    for step in range(max_new_tokens):
        toks, lps = _draw(logits, rule)
        for row, (tok, lp) in enumerate(zip(toks, lps, strict=True)):
            if not done[row]:
                sampled[row].append(tok)
                logps[row].append(lp)
                done[row] = tok in rule.stop_ids
        if all(done) or step == max_new_tokens - 1:
            break
        logits = rows.feed([[] if d else [t] for t, d in zip(toks, done, strict=True)])
    return [
        Generation(tuple(ids), tuple(lps), bool(ids) and ids[-1] in rule.stop_ids)
        for ids, lps in zip(sampled, logps, strict=True)
    ]


class KVCacheSampler:
    """Samples the next response of many episodes, keeping each keyed episode's KV cache.

    ``batch_size`` bounds the rows of one forward pass; episodes first seen in
    the same call share a cache in chunks of that size for their whole life.
    """

    def __init__(self, model: Any, rule: SamplingRule, *, batch_size: int = 64) -> None:
        if batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size!r}")
        self.model = model
        self.rule = rule
        self.batch_size = batch_size
        self._batches: list[_CacheRows] = []
        self.ids_fed = 0  # ids run through the model so far (padding excluded), all calls

    def reset(self) -> None:
        """Drop every cache (call it whenever the model's weights change)."""
        self._batches = []

    @property
    def cached_episodes(self) -> int:
        """How many episodes hold a cache now."""
        return sum(len(rows.keys) for rows in self._batches)

    def sample(
        self,
        contexts: Sequence[Sequence[int]],
        episodes: Sequence[Hashable | None],
        max_new_tokens: int,
    ) -> list[Generation]:
        """The next response after each context, in order; ``episodes[i]`` keys context ``i``'s
        cache (``None``: re-read from scratch, nothing kept). Caches of episodes absent from
        this call are dropped.

        Raises:
            ConfigError: mismatched lengths, an empty context, an episode key twice, or
                ``max_new_tokens < 1``.
        """
        _check_call(contexts, episodes, max_new_tokens)
        jobs = self._plan(episodes)
        out: list[Generation | None] = [None] * len(contexts)
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad(), grouped_attention(self.model):
                for rows, order in jobs:
                    new = [_suffix(rows, row, contexts[i]) for row, i in enumerate(order)]
                    gens = _decode(rows, new, max_new_tokens, self.rule)
                    for i, gen in zip(order, gens, strict=True):
                        out[i] = gen
                    rows.compact()
                    self.ids_fed += rows.ids_fed
                    rows.ids_fed = 0
        except BaseException:
            self._batches = []  # a cache fed halfway must not serve the next call
            raise
        finally:
            self.model.train(was_training)
        self._batches = [
            rows for rows, _ in jobs if rows.keys[0] is not None and _reusable(rows.cache)
        ]
        return [gen for gen in out if gen is not None]  # every slot is filled

    def _plan(self, episodes: Sequence[Hashable | None]) -> list[tuple[_CacheRows, list[int]]]:
        """Which cache serves which requests: kept caches first (rows of absent episodes
        dropped), then new chunks of ``batch_size``: new episodes (kept after the call),
        then unkeyed requests (dropped after it)."""
        where = {key: i for i, key in enumerate(episodes) if key is not None}
        jobs: list[tuple[_CacheRows, list[int]]] = []
        for rows in self._batches:
            present = [r for r, key in enumerate(rows.keys) if key in where]
            if present:
                rows.keep(present)
                jobs.append((rows, [where.pop(key) for key in rows.keys]))
        unkeyed = [i for i, key in enumerate(episodes) if key is None]
        for fresh in (sorted(where.values()), unkeyed):
            for start in range(0, len(fresh), self.batch_size):
                order = fresh[start : start + self.batch_size]
                jobs.append((_CacheRows(self.model, [episodes[i] for i in order]), order))
        return jobs


def _suffix(rows: _CacheRows, row: int, context: Sequence[int]) -> list[int]:
    """Rewind ``row`` to its common prefix with ``context`` and return the ids to feed (at
    least one: the logits after the context's last id are needed)."""
    keep = min(common_prefix(rows.fed[row], context), len(context) - 1)
    rows.rewind(row, keep)
    return list(context[keep:])


def _check_call(
    contexts: Sequence[Sequence[int]], episodes: Sequence[Hashable | None], max_new_tokens: int
) -> None:
    if len(contexts) != len(episodes):
        raise ConfigError(f"{len(contexts)} contexts but {len(episodes)} episode keys")
    if max_new_tokens < 1:
        raise ConfigError(f"max_new_tokens must be >= 1, got {max_new_tokens!r}")
    for i, context in enumerate(contexts):
        if not context:
            raise ConfigError(f"context {i} is empty: a generation needs at least one id")
    keys = [key for key in episodes if key is not None]
    if len(set(keys)) != len(keys):
        twice = sorted({repr(k) for k in keys if keys.count(k) > 1})
        raise ConfigError(f"episode key(s) {', '.join(twice)} appear twice in one call")
