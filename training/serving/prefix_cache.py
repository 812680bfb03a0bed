"""Prefix caching across requests for the loopback server, on the sampler's own KV rows.

A multi-turn conversation sent to a chat server repeats its whole history in
every request. :class:`PrefixCache` keeps, per conversation, the KV cache of
the ids the model last read for it (a row of the in-process sampler's
:class:`~budgetmix.training.rollouts.sampler._CacheRows`: growing buffers, rewinds,
padding in the middle, compaction), and feeds a new request only the ids past
the longest cached prefix, as vLLM's automatic prefix caching does.

Finding the prefix: each entry is indexed by the chained hashes of its full
blocks of :data:`BLOCK` ids; a prompt walks its own block hashes to the
deepest block some entry shares, and the candidate with the longest exact
common prefix wins (hashes only choose; the row is rewound to the exact common
prefix, so a collision costs speed, never correctness). Prompts with the
longest cached prefix choose first. A candidate whose cached ids the prompt
mostly extends (3/4 or more) is *taken* (the conversation goes on); one that
shares only a shorter head (another conversation with the same system prompt
and tools), or one taken already, is *copied*, and the original stays cached. A prompt
sharing no full block starts a fresh row.

Each call assembles one batch of rows in the order of its prompts, so a seeded
batch draws from its generator row by row as the uncached path does, and the
ids are those of reading every prompt whole (the logits differ by float
rounding only). Memory is bounded: after each call the least recently used
entries are evicted until at most ``max_entries`` conversations and
``max_columns`` cache columns (rows x width, masked columns included) remain.
The cache is dropped when the model's parameters change in place (an
optimiser step, ``load_state_dict``: torch's version counters) or by
:meth:`PrefixCache.clear`, and after a call that fails halfway.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from budgetmix.exceptions import ConfigError
from budgetmix.training.rollouts.attention import grouped_attention
from budgetmix.training.rollouts.sampler import (
    Generation,
    SamplingRule,
    _CacheRows,
    _decode,
    _reusable,
    _suffix,
    common_prefix,
)

__all__ = ["BLOCK", "PrefixCache"]

#: Ids per hashed block of the prefix index.
BLOCK = 16


def _block_hashes(ids: Sequence[int]) -> list[int]:
    """The chained hash of each full block of ``ids`` (block i's hash covers ids[: (i+1)*BLOCK])."""
    out: list[int] = []
    h = 0
    for start in range(0, len(ids) - BLOCK + 1, BLOCK):
        h = hash((h, tuple(ids[start : start + BLOCK])))
        out.append(h)
    return out


@dataclass(frozen=True, slots=True)
class _Source:
    """Where a prompt's row comes from: an entry's row (taken or copied) or nothing (fresh)."""

    key: int
    group: _CacheRows | None = None
    row: int = 0
    take: bool = False


class PrefixCache:
    """Per-conversation KV caches of ``model`` for the server's batches (see the module docstring).

    Raises:
        ConfigError: a bound below 1.
    """

    def __init__(self, model: Any, *, max_entries: int = 256, max_columns: int = 1 << 18) -> None:
        if max_entries < 1 or max_columns < 1:
            raise ConfigError("PrefixCache: max_entries and max_columns must be >= 1")
        self.model = model
        self.max_entries = max_entries
        self.max_columns = max_columns
        self.groups: list[_CacheRows] = []
        self._lru: OrderedDict[int, None] = OrderedDict()
        self._index: dict[int, set[int]] = {}
        self._hashes: dict[int, list[int]] = {}
        self._next_key = 0
        self._stamp = self._weights_stamp()
        self.hits = 0  # prompt ids served from the cache, all calls
        self.copied = 0  # rows copied from another conversation's head, all calls
        self.ids_fed = 0  # ids run through the model (padding excluded), all calls

    # -- state -----------------------------------------------------------------------
    @property
    def entries(self) -> int:
        """Conversations cached now."""
        return sum(len(g.keys) for g in self.groups)

    @property
    def columns(self) -> int:
        """Cache columns held now (rows x width)."""
        return sum(len(g.keys) * g.width for g in self.groups)

    def clear(self) -> None:
        """Drop every cached conversation."""
        self.groups, self._index, self._hashes = [], {}, {}
        self._lru.clear()
        self._stamp = self._weights_stamp()

    def _weights_stamp(self) -> tuple[int, int]:
        params = list(self.model.parameters())
        return len(params), sum(int(p._version) for p in params)

    # -- one call --------------------------------------------------------------------
    def sample(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int, rule: SamplingRule
    ) -> list[Generation]:
        """The next response after each prompt, in order (as the sampler's uncached path)."""
        rows, new = self.admit(prompts)
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad(), grouped_attention(self.model):
                gens = _decode(rows, new, max_new_tokens, rule)
                rows.compact()
        except BaseException:
            self.clear()  # a cache fed halfway must not serve the next call
            raise
        finally:
            self.model.train(was_training)
        self.keep(rows)
        return gens

    def admit(self, prompts: Sequence[Sequence[int]]) -> tuple[_CacheRows, list[list[int]]]:
        """Rows for ``prompts`` (row i serves prompt i): taken or copied from the cache, or
        fresh, each rewound to its longest cached prefix; and the ids each row must still
        be fed (at least one). Taken rows leave the cache until :meth:`keep` returns them."""
        if self._weights_stamp() != self._stamp:
            self.clear()
        sources = self._match(prompts)
        rows = self._assemble(sources)
        for source in sources:
            if source.take:  # out of the index too until kept again: no match finds it
                self._unindex(source.key)
        new = [_suffix(rows, r, p) for r, p in enumerate(prompts)]
        self.hits += sum(len(p) - len(n) for p, n in zip(prompts, new, strict=True))
        return rows, new

    def keep(self, rows: _CacheRows) -> None:
        """Cache ``rows`` (rows :meth:`admit` made, fed since): each holds its
        conversation's ids for the next request to extend. The least recently used
        entries are evicted past the bounds."""
        self.ids_fed += rows.ids_fed
        rows.ids_fed = 0
        if not _reusable(rows.cache):
            self.clear()
            return
        self.groups.append(rows)
        for key, fed in zip(rows.keys, rows.fed, strict=True):
            assert isinstance(key, int)
            self._reindex(key, fed)
        self._evict()

    def _match(self, prompts: Sequence[Sequence[int]]) -> list[_Source]:
        """Each prompt's source: prompts with the longest cached prefix choose first; a
        candidate the prompt mostly extends is taken, else the best one is copied."""
        where = {key: (g, r) for g in self.groups for r, key in enumerate(g.keys)}
        options = [
            sorted(
                ((common_prefix(where[k][0].fed[where[k][1]], p), k) for k in self._candidates(p)),
                reverse=True,
            )
            for p in prompts
        ]
        order = sorted(range(len(prompts)), key=lambda i: -(options[i][0][0] if options[i] else 0))
        taken: set[int] = set()
        out: list[_Source] = [_Source(0)] * len(prompts)
        for i in order:
            if not options[i] or options[i][0][0] == 0:
                out[i] = _Source(self._new_key())
                continue
            for common, key in options[i]:
                group, row = where[key]
                if key not in taken and 4 * common >= 3 * len(group.fed[row]):
                    taken.add(key)  # the conversation goes on: its row moves to this prompt
                    out[i] = _Source(key, group, row, take=True)
                    break
            else:  # another conversation's head (or a row taken already): copied
                group, row = where[options[i][0][1]]
                out[i] = _Source(self._new_key(), group, row)
                self.copied += 1
        return out

    def _candidates(self, prompt: Sequence[int]) -> list[int]:
        """Entries sharing the deepest full block with ``prompt`` (the newest 8)."""
        found: set[int] = set()
        for h in _block_hashes(prompt):
            keys = self._index.get(h)
            if not keys:
                break
            found = keys
        return sorted(found)[-8:]  # keys count up: the newest conversations

    def _new_key(self) -> int:
        self._next_key += 1
        return self._next_key

    def _assemble(self, sources: Sequence[_Source]) -> _CacheRows:
        """One batch of rows, row i serving prompt i; taken rows leave their groups."""
        keys: list[Any] = [s.key for s in sources]
        if all(s.group is None for s in sources):
            return _CacheRows(self.model, keys)
        first = sources[0].group
        whole = first is not None and all(
            s.take and s.group is first and s.row == i for i, s in enumerate(sources)
        )
        if whole and first is not None and len(first.keys) == len(sources):
            self.groups.remove(first)
            return first  # the same conversations, in the same order: no copy
        rows = _CacheRows(self.model, keys)
        _fill(rows, sources)
        self._release([s for s in sources if s.take])
        return rows

    def _release(self, taken: Sequence[_Source]) -> None:
        """Remove the taken rows from the groups they came from (emptied groups are dropped)."""
        gone = {s.key for s in taken}
        kept: list[_CacheRows] = []
        for group in self.groups:
            rest = [r for r, key in enumerate(group.keys) if key not in gone]
            if rest:
                group.keep(rest)
                kept.append(group)
        self.groups = kept

    # -- the index and eviction --------------------------------------------------------
    def _reindex(self, key: int, fed: Sequence[int]) -> None:
        self._unindex(key)
        hashes = _block_hashes(fed)
        for h in hashes:
            self._index.setdefault(h, set()).add(key)
        self._hashes[key] = hashes
        self._lru[key] = None
        self._lru.move_to_end(key)

    def _unindex(self, key: int) -> None:
        for h in self._hashes.pop(key, []):
            keys = self._index.get(h)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._index[h]
        self._lru.pop(key, None)

    def _evict(self) -> None:
        """Drop least recently used entries until both bounds hold."""
        entries, columns = self.entries, self.columns
        width = {key: g.width for g in self.groups for key in g.keys}
        gone: list[_Source] = []
        for key in list(self._lru):
            if entries <= self.max_entries and columns <= self.max_columns:
                break
            entries -= 1
            columns -= width.get(key, 0)
            gone.append(_Source(key))
            self._unindex(key)
        if gone:
            self._release(gone)


def _fill(rows: _CacheRows, sources: Sequence[_Source]) -> None:
    """Copy each source row (left-padded with masked columns) into the fresh ``rows``."""
    groups = [s.group for s in sources if s.group is not None]
    width = max(g.width for g in groups)
    device = rows.device
    rows.valid = torch.zeros((len(sources), width), dtype=torch.long, device=device)
    for i, s in enumerate(sources):
        if s.group is None:
            continue
        pad = width - s.group.width
        rows.valid[i, pad:] = s.group.valid[s.row]
        rows.fed[i] = list(s.group.fed[s.row])
        rows.cols[i] = [c + pad for c in s.group.cols[s.row]]
    for index, layer in enumerate(rows.cache.layers):
        like = groups[0].cache.layers[index]
        if not like.is_initialized:
            continue
        shape = like.keys.shape
        keys = like.keys.new_zeros((len(sources), *shape[1:-2], width, shape[-1]))
        values = like.values.new_zeros((*keys.shape[:-1], like.values.shape[-1]))
        for i, s in enumerate(sources):
            if s.group is not None:
                src = s.group.cache.layers[index]
                w = s.group.width
                keys[i, ..., width - w :, :] = src.keys[s.row]
                values[i, ..., width - w :, :] = src.values[s.row]
        layer.lazy_initialization(keys, values)
        layer.replace(keys, values)
