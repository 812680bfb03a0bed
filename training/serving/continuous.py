"""Continuous batching for the loopback server: a request joins the running batch at the next id.

A batch sampled to its end makes every request that arrives meanwhile wait for the
batch's longest reply, then run in a smaller batch of its own: a multi-turn rollout's
requests, which come back at different times, split into many small batches and many
more forward passes than the in-process sampler's one batch. :class:`ContinuousBatch`
does what vLLM's scheduler does: every forward pass feeds each running request its last
sampled id and each joining request its prompt (the ids past its cached prefix, padded
in the middle as the in-process sampler pads), then draws one id per request; a request
that stops or reaches its ``max_tokens`` leaves at once, its row handed to the
:class:`~budgetmix.training.serving.prefix_cache.PrefixCache` for its conversation's
next request.

Each request keeps its own sampling: its temperature (``0``: greedy), its own generator
when it has a ``seed`` (so its ids do not depend on what it is batched with), else the
server's generator, drawn from for the unseeded rows together in row order. The logits
of a row differ from a batch of its own by float rounding only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from budgetmix.training.rollouts.sampler import Generation, _CacheRows, _reusable, _suffix
from budgetmix.training.serving.prefix_cache import PrefixCache

__all__ = ["ContinuousBatch", "Request"]


@dataclass(slots=True, eq=False)
class Request:
    """One completion to sample: its prompt ids, its sampling, and where its result goes
    (``finish`` gets the :class:`Generation`, or the exception that failed it). Equal only
    to itself (``eq=False``): ``in`` finds this request, not one with the same fields."""

    prompt: Sequence[int]
    max_tokens: int
    temperature: float
    generator: torch.Generator | None
    finish: Callable[[Generation | BaseException], None]
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)


class ContinuousBatch:
    """The requests being sampled now, in one KV cache (one row each).

    Args:
        model: the causal LM (put in eval mode and under ``no_grad`` by the caller).
        cache: conversations' rows kept across requests (``None``: every prompt read whole).
        stop_ids: ids that end a reply.
        shared: the generator of requests without one of their own.
        max_rows: most requests running at once.
    """

    def __init__(
        self,
        model: Any,
        *,
        cache: PrefixCache | None,
        stop_ids: frozenset[int],
        shared: torch.Generator,
        max_rows: int,
    ) -> None:
        self.model = model
        self.cache = cache
        self.stop_ids = stop_ids
        self.shared = shared
        self.max_rows = max_rows
        self.running: list[Request] = []
        self.rows: _CacheRows | None = None
        self.forward_passes = 0  # all steps so far
        self.finished = 0  # requests finished (sampled to their end) so far

    @property
    def room(self) -> int:
        """How many more requests may join now (none while rows that cannot be merged,
        of a model with sliding-window or other partial caches, are running)."""
        if self.rows is not None and not _reusable(self.rows.cache):
            return 0
        return self.max_rows - len(self.running)

    def step(self, joining: Sequence[Request]) -> None:
        """Admit ``joining`` (at most :attr:`room`), run one forward pass and draw one id
        per request; requests that end are finished and leave. A failure (the forward
        pass raising) finishes every request here, joining ones too, with the exception,
        and empties the batch and the cache (rows fed halfway must not serve again)."""
        try:
            self._step(joining)
        except Exception as exc:
            failed = [*self.running, *(r for r in joining if r not in self.running)]
            self.running, self.rows = [], None
            if self.cache is not None:
                self.cache.clear()
            for request in failed:
                request.finish(exc)

    def _step(self, joining: Sequence[Request]) -> None:
        feed: list[list[int]] = [[r.ids[-1]] for r in self.running]
        if joining:
            rows, new = self._admit([r.prompt for r in joining])
            self.rows = rows if self.rows is None else _merged(self.rows, rows)
            self.running = [*self.running, *joining]
            feed += new
        assert self.rows is not None, "a step needs a request"
        before = self.rows.ids_fed
        logits = self.rows.feed(feed)
        self.forward_passes += 1
        if self.cache is not None:  # its count of ids read, as its own calls keep it
            self.cache.ids_fed += self.rows.ids_fed - before
        tokens, logprobs = _draw(logits, self.running, self.shared)
        staying: list[int] = []
        ended: list[int] = []
        for row, (request, token, logprob) in enumerate(
            zip(self.running, tokens, logprobs, strict=True)
        ):
            request.ids.append(token)
            request.logprobs.append(logprob)
            done = token in self.stop_ids or len(request.ids) >= request.max_tokens
            (ended if done else staying).append(row)
        if ended:
            self._leave(ended, staying)

    def _admit(self, prompts: Sequence[Sequence[int]]) -> tuple[_CacheRows, list[list[int]]]:
        if self.cache is not None:
            return self.cache.admit(prompts)
        rows = _CacheRows(self.model, [None] * len(prompts))
        return rows, [_suffix(rows, r, p) for r, p in enumerate(prompts)]

    def _leave(self, ended: list[int], staying: list[int]) -> None:
        """Finish the ``ended`` rows' requests; their rows go to the cache."""
        rows = self.rows
        assert rows is not None
        done = [self.running[r] for r in ended]
        if self.cache is not None and _reusable(rows.cache):
            self.cache.keep(_copied(rows, ended))
        if staying:
            rows.keep(staying)
            rows.compact()
            self.running = [self.running[r] for r in staying]
        else:
            self.rows, self.running = None, []
        self.finished += len(done)
        for request in done:
            stopped = request.ids[-1] in self.stop_ids
            request.finish(Generation(tuple(request.ids), tuple(request.logprobs), stopped))


def _draw(
    logits: torch.Tensor, requests: Sequence[Request], shared: torch.Generator
) -> tuple[list[int], list[float]]:
    """One id per row, each under its request's sampling, and its log-prob (as the
    sampler's ``_draw`` computes them for a batch of one rule)."""
    temperatures = [r.temperature if r.temperature > 0 else 1.0 for r in requests]
    scaled = logits.float()
    if any(t != 1.0 for t in temperatures):
        scaled = scaled / torch.tensor(temperatures, dtype=scaled.dtype)[:, None]
    logp = torch.log_softmax(scaled, dim=-1)
    tokens = logp.argmax(dim=-1)  # greedy rows keep theirs
    common = [i for i, r in enumerate(requests) if r.temperature > 0 and r.generator is None]
    if common:
        index = torch.tensor(common)
        drawn = torch.multinomial(logp[index].exp().cpu(), 1, generator=shared).squeeze(-1)
        tokens[index] = drawn.to(tokens.device)
    for i, r in enumerate(requests):
        if r.temperature > 0 and r.generator is not None:
            own = torch.multinomial(logp[i : i + 1].exp().cpu(), 1, generator=r.generator)
            tokens[i] = int(own)
    chosen = logp.gather(-1, tokens[:, None]).squeeze(-1)
    return [int(t) for t in tokens.tolist()], [float(x) for x in chosen.tolist()]


def _padded(tensor: torch.Tensor, width: int) -> torch.Tensor:
    """``tensor`` (columns on dim -2) left-padded with zeros to ``width`` columns."""
    missing = width - tensor.shape[-2]
    if not missing:
        return tensor
    pad = tensor.new_zeros((*tensor.shape[:-2], missing, tensor.shape[-1]))
    return torch.cat([pad, tensor], dim=-2)


def _merged(first: _CacheRows, second: _CacheRows) -> _CacheRows:
    """One set of rows: ``first``'s then ``second``'s, the narrower left-padded with masked
    columns (``second``'s layers may be empty: rows not fed yet)."""
    width = max(first.width, second.width)
    out = _CacheRows(first.model, [*first.keys, *second.keys])
    device = first.device
    out.valid = torch.zeros((len(out.keys), width), dtype=torch.long, device=device)
    offset = 0
    for part in (first, second):
        pad = width - part.width
        n = len(part.keys)
        out.valid[offset : offset + n, pad:] = part.valid
        for row in range(n):
            out.fed[offset + row] = part.fed[row]
            out.cols[offset + row] = [c + pad for c in part.cols[row]]
        offset += n
    for index, layer in enumerate(out.cache.layers):
        a, b = first.cache.layers[index], second.cache.layers[index]
        if not a.is_initialized:
            continue  # a layer nothing was fed to yet (none in practice: first has run)
        keys, values = [_padded(a.keys, width)], [_padded(a.values, width)]
        if b.is_initialized:
            keys.append(_padded(b.keys, width))
            values.append(_padded(b.values, width))
        else:
            shape = (len(second.keys), *a.keys.shape[1:-2], width)
            keys.append(a.keys.new_zeros((*shape, a.keys.shape[-1])))
            values.append(a.values.new_zeros((*shape, a.values.shape[-1])))
        merged_keys, merged_values = torch.cat(keys), torch.cat(values)
        layer.lazy_initialization(merged_keys, merged_values)
        layer.replace(merged_keys, merged_values)
    return out


def _copied(rows: _CacheRows, picked: Sequence[int]) -> _CacheRows:
    """A new set of rows holding copies of ``rows``' rows ``picked`` (``rows`` unchanged)."""
    out = _CacheRows(rows.model, [rows.keys[r] for r in picked])
    index = torch.tensor(list(picked), dtype=torch.long, device=rows.device)
    out.valid = rows.valid[index]
    out.fed = [list(rows.fed[r]) for r in picked]
    out.cols = [list(rows.cols[r]) for r in picked]
    for layer, source in zip(out.cache.layers, rows.cache.layers, strict=True):
        if source.is_initialized:
            keys, values = source.keys[index], source.values[index]
            layer.lazy_initialization(keys, values)
            layer.replace(keys, values)
    return out
