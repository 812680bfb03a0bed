"""The KV cache rows of a batched evaluation's episodes, and one batch's sampling on them.

:class:`~budgetmix.training.serving.serve_batch.EpisodeBatcher` samples the turns of concurrent
episodes together; this module holds their caches and runs a batch. A turn first feeds
each episode the ids its cache has not seen (the prompt of a new episode, the sampled
last id and the environment's answer of one going on), then decodes one id per row per
forward pass for the whole batch.

A turn with many new ids (a new episode's prompt, hundreds of ids; an observation of
more than :data:`PREFILL_IDS`) is not padded to in the batch's first forward pass: its
own thread *prefills* it before it joins the queue (:meth:`EpisodeRows.prefill`), in a
forward pass of its own on a copy of its row's live columns (no masked column, no padding),
beside the other episodes' prefills, as batch-1 agents run theirs; the batch then joins
the copies into one cache and decodes. Short new ids are fed in the batch's first forward.
Either way each row reads the same ids at the same positions as a batch-1 sampler's row,
so the logits differ by float rounding only.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from budgetmix.training.rollouts.attention import grouped_attention
from budgetmix.training.rollouts.sampler import (
    Generation,
    SamplingRule,
    _CacheRows,
    _draw,
    _reusable,
    _suffix,
    common_prefix,
)
from budgetmix.training.serving.prefix_cache import _fill, _Source

if TYPE_CHECKING:
    from budgetmix.training.serving.serve_batch import _Request

#: A turn with more new ids than this is prefilled alone (its thread, its own forward pass).
PREFILL_IDS = 32


@dataclass(frozen=True, slots=True)
class Prefill:
    """A turn's new ids read ahead of its batch: a one-row cache holding the episode's
    context, and the logits after its last id."""

    rows: _CacheRows
    logits: torch.Tensor


class EpisodeRows:
    """Every episode's KV cache row, in groups (one group per batch that last ran them).

    ``lock`` guards the groups: a batch's thread and the threads prefilling their turns
    (:meth:`prefill`) touch them under it; a running batch's rows are its own."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.groups: list[_CacheRows] = []
        self.ids_fed = 0
        self.prefilled = 0  # turns prefilled alone so far
        self.lock = threading.Lock()
        self.joinable = _reusable(_CacheRows(model, []).cache)  # rows can be copied

    def drop(self, keys: set[int]) -> None:
        """Free the rows of ``keys`` (emptied groups are dropped)."""
        if keys:
            with self.lock:
                self._drop(keys)

    def _drop(self, keys: set[int]) -> None:
        kept: list[_CacheRows] = []
        for group in self.groups:
            rest = [r for r, key in enumerate(group.keys) if key not in keys]
            if rest:
                group.keep(rest)
                kept.append(group)
        self.groups = kept

    def prefill(self, key: int, context: Sequence[int]) -> Prefill | None:
        """Episode ``key``'s new ids for ``context`` fed in a forward pass of their own, on a
        copy of its row's live columns (no padding, no masked column); ``None`` when they
        are :data:`PREFILL_IDS` or fewer (its batch feeds them) or rows cannot be copied.
        Runs in the calling thread, beside other episodes' prefills and batches.

        Raises:
            Exception: whatever the forward pass raised (nothing is kept).
        """
        if not self.joinable:
            return None
        with self.lock:
            where = self._where()
            held = where.get(key)
            fed = self.groups[held[0]].fed[held[1]] if held is not None else []
            if len(context) - min(common_prefix(fed, context), len(context) - 1) <= PREFILL_IDS:
                return None
            single = self._copy(key, where)
        was_training = self.model.training
        if was_training:
            self.model.eval()
        try:
            with torch.no_grad(), grouped_attention(self.model):
                logits = single.feed([_suffix(single, 0, context)])[0]
        finally:
            if was_training:
                self.model.train()
        with self.lock:
            self.ids_fed += single.ids_fed
            self.prefilled += 1
        single.ids_fed = 0
        return Prefill(single, logits)

    def sample(
        self,
        batch: Sequence[_Request],
        rules: Sequence[SamplingRule],
    ) -> list[Generation]:
        """One response per request, in order, from one batch of rows; the rows are kept.
        A request with a :class:`Prefill` (``req.prefill``) joins it; the others' new ids
        are fed together in one padded forward pass. A batch that fails keeps none of its
        rows (a request sampled again re-reads its context; a prefill stays valid)."""
        with self.lock:
            where = self._where()
            order = sorted(
                range(len(batch)), key=lambda i: where.get(batch[i].key, (len(where), i))
            )
            requests = [batch[i] for i in order]
            singles = {r.key: r.prefill.rows for r in requests if r.prefill is not None}
            spare = max(r.max_new_tokens for r in requests) + PREFILL_IDS
            rows = self._assemble([r.key for r in requests], where, singles, spare)
        first = {row: r.prefill.logits for row, r in enumerate(requests) if r.prefill is not None}
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad(), grouped_attention(self.model):
                new = [
                    [] if row in first else _suffix(rows, row, req.context)
                    for row, req in enumerate(requests)
                ]
                limits = [req.max_new_tokens for req in requests]
                gens = _decode_rows(rows, new, first, limits, [rules[i] for i in order])
                rows.compact()
        finally:
            self.model.train(was_training)
            with self.lock:
                self.ids_fed += rows.ids_fed
            rows.ids_fed = 0
        if _reusable(rows.cache):  # else nothing is kept: the next turn re-reads
            with self.lock:
                self.groups.append(rows)
        out: list[Generation | None] = [None] * len(batch)
        for i, gen in zip(order, gens, strict=True):
            out[i] = gen
        return [gen for gen in out if gen is not None]

    def _where(self) -> dict[Hashable, tuple[int, int]]:
        return {
            key: (g, r) for g, group in enumerate(self.groups) for r, key in enumerate(group.keys)
        }

    def _copy(self, key: int, where: dict[Hashable, tuple[int, int]]) -> _CacheRows:
        """A one-row cache for ``key``: its row's live columns copied (fresh if it has none);
        the row itself stays where it is until its batch is assembled."""
        single = _CacheRows(self.model, [key])
        held = where.get(key)
        if held is None:
            return single
        group, row = self.groups[held[0]], held[1]
        n = len(group.cols[row])
        cols = torch.tensor(group.cols[row], dtype=torch.long, device=group.device)
        single.valid = torch.ones((1, n), dtype=torch.long, device=group.device)
        single.fed = [list(group.fed[row])]
        single.cols = [list(range(n))]
        for layer, source in zip(single.cache.layers, group.cache.layers, strict=True):
            if source.is_initialized:
                keys = source.keys[row : row + 1].index_select(2, cols)
                values = source.values[row : row + 1].index_select(2, cols)
                layer.lazy_initialization(keys, values)
                layer.replace(keys, values)
        return single

    def _assemble(
        self,
        keys: list[int],
        where: dict[Hashable, tuple[int, int]],
        singles: dict[int, _CacheRows],
        spare: int,
    ) -> _CacheRows:
        """Rows for ``keys`` (in this order; the lock held): an earlier batch's as is when
        they are exactly its episodes and none was prefilled, else gathered from theirs
        (``singles`` for the prefilled ones, fresh rows for new episodes), with ``spare``
        columns free for the decoding. Either way the rows leave their groups: a batch that
        fails keeps none of them."""
        held = [where.get(key) for key in keys]
        groups = {g for g, _ in (h for h in held if h is not None)}
        if not singles and len(groups) == 1 and all(h is not None for h in held):
            (g,) = groups
            group = self.groups[g]
            if group.keys == keys:
                del self.groups[g]
                return group
        rows = _CacheRows(self.model, list(keys))
        sources = [
            _Source(key, singles[key], 0)
            if key in singles
            else _Source(key)
            if h is None
            else _Source(key, self.groups[h[0]], h[1])
            for key, h in zip(keys, held, strict=True)
        ]
        if any(s.group is not None for s in sources):
            _join(rows, sources, spare)
            self._drop(set(keys))
        return rows


def _join(rows: _CacheRows, sources: Sequence[_Source], spare: int) -> None:
    """Copy each source row (left-padded with masked columns) into the fresh ``rows``, as
    :func:`~budgetmix.training.serving.prefix_cache._fill` does, into buffers with ``spare`` free
    columns on the right: the decoding writes its ids there in place (no buffer grown, so
    no second copy of the batch's cache)."""
    groups = [s.group for s in sources if s.group is not None]
    width = max(g.width for g in groups)
    layers = rows.cache.layers
    if not all(hasattr(layer, "replace") for layer in layers):  # not the growing layers
        _fill(rows, sources)
        return
    device = rows.device
    rows.valid = torch.zeros((len(sources), width), dtype=torch.long, device=device)
    for i, s in enumerate(sources):
        if s.group is not None:
            pad = width - s.group.width
            rows.valid[i, pad:] = s.group.valid[s.row]
            rows.fed[i] = list(s.group.fed[s.row])
            rows.cols[i] = [c + pad for c in s.group.cols[s.row]]
    for index, layer in enumerate(layers):
        like = groups[0].cache.layers[index]
        if not like.is_initialized:
            continue
        shape = like.keys.shape
        keys = like.keys.new_empty((len(sources), *shape[1:-2], width + spare, shape[-1]))
        values = like.values.new_empty((*keys.shape[:-1], like.values.shape[-1]))
        for i, s in enumerate(sources):
            w = s.group.width if s.group is not None else 0
            keys[i, ..., : width - w, :] = 0  # masked, but never garbage: 0 x NaN is NaN
            values[i, ..., : width - w, :] = 0
            if s.group is not None:
                source = s.group.cache.layers[index]
                keys[i, ..., width - w : width, :] = source.keys[s.row]
                values[i, ..., width - w : width, :] = source.values[s.row]
        layer.lazy_initialization(keys, values)
        layer.buffers, layer.length = (keys, values), width
        layer.keys, layer.values = keys[..., :width, :], values[..., :width, :]


def _decode_rows(
    rows: _CacheRows,
    new: Sequence[Sequence[int]],
    first: dict[int, torch.Tensor],
    limits: Sequence[int],
    rules: Sequence[SamplingRule],
) -> list[Generation]:
    """Feed ``new`` to each row (``first`` holds the logits of the rows prefilled alone,
    fed nothing here), then sample up to ``limits[row]`` ids per row, each row drawing
    from its own rule's generator and only while it has not stopped (the last id a row
    samples is not fed: the next turn feeds it)."""
    if len(first) == len(new):
        logits = torch.stack([first[row] for row in range(len(new))])
    else:
        logits = rows.feed(new)
        for row, row_logits in first.items():
            logits[row] = row_logits
    sampled: list[list[int]] = [[] for _ in new]
    logps: list[list[float]] = [[] for _ in new]
    done = [False] * len(new)
    greedy = rules[0].temperature == 0.0
    while True:
        live = [row for row, d in enumerate(done) if not d]
        if greedy:  # an argmax per row: the batch draws them all at once
            toks, lps = _draw(logits, rules[0])
            drawn = [(toks[row], lps[row]) for row in live]
        else:
            drawn = [_first(_draw(logits[row : row + 1], rules[row])) for row in live]
        for row, (tok, lp) in zip(live, drawn, strict=True):
            sampled[row].append(tok)
            logps[row].append(lp)
            done[row] = tok in rules[row].stop_ids or len(sampled[row]) >= limits[row]
        if all(done):
            break
        logits = rows.feed([[] if d else [ids[-1]] for ids, d in zip(sampled, done, strict=True)])
    return [
        Generation(tuple(ids), tuple(lps), bool(ids) and ids[-1] in rule.stop_ids)
        for ids, lps, rule in zip(sampled, logps, rules, strict=True)
    ]


def _first(drawn: tuple[list[int], list[float]]) -> tuple[int, float]:
    return drawn[0][0], drawn[1][0]
