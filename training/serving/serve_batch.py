"""Batched checkpoint serving: the turns of concurrent episodes sampled in one forward pass.

The evaluator plays ``concurrency`` episodes at once, one
:class:`~budgetmix.training.serving.serve.TrainedPolicyAgent` each, every agent calling ``act``
from its own thread. Agents built by :meth:`TrainedPolicyAgent.factory` with
``batch_size`` above 1 share one :class:`EpisodeBatcher`: a turn's request waits until
``batch_size`` requests are pending, or every episode in flight has one pending, or the
oldest has waited ``flush_s`` and no turn is being prefilled (below); then one of the
waiting threads samples them all together (one forward pass per sampled id for the whole
batch) and hands each episode its response.

Each episode keeps its KV cache from one turn to the next (a row of the sampler's cache
rows, :mod:`budgetmix.training.rollouts.sampler`), so a turn feeds the model its new ids only. A
batch whose episodes are exactly those of one earlier batch runs on that batch's cache as
it is; otherwise their rows are gathered into one cache (copied, padded on the left), and
each forward pass pads in the middle, as the training sampler's batches do. Long new ids
(a new episode's prompt) are not padded to: such a row is prefilled in a forward pass of
its own and joined into the batch for the decoding (:mod:`budgetmix.training.serving.serve_rows`).

The same responses as batch 1: every agent draws from its own ``torch.Generator`` (seeded
with the agent's seed, as a batch-1 agent's is), one draw per id of its own response and
none for a row that has stopped, so an episode's ids do not depend on the batch it is in
or its row (the logits differ from batch 1's by float rounding only).

Failures stay in their episode. A batch whose forward pass raises is sampled again one
request at a time, each from the state before the batch (its generator rewound, its
context re-read), so only the request that fails raises. An episode that raises in its own
code, or ends, leaves the batches: its agent resets its generator, or is garbage collected,
and its cache row is dropped before the next batch.
"""

from __future__ import annotations

import itertools
import threading
import time
import weakref
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from budgetmix.exceptions import ConfigError
from budgetmix.training.rollouts.sampler import Generation, SamplingRule, stop_token_ids
from budgetmix.training.serving.serve_rows import EpisodeRows, Prefill

__all__ = ["BatchedGenerator", "EpisodeBatcher"]


@dataclass(slots=True, eq=False)
class _Request:
    """One episode's turn waiting for its response."""

    handle: int
    key: int
    context: list[int]
    max_new_tokens: int
    rng: torch.Generator | None
    since: float
    result: Generation | None = None
    error: BaseException | None = None
    finished: bool = False
    prefill: Prefill | None = None  # its new ids, read ahead in its own thread


@dataclass(slots=True)
class _Queue:
    """What the threads share (guarded by the batcher's condition)."""

    pending: list[_Request] = field(default_factory=list)
    active: set[int] = field(default_factory=set)  # handles in an episode (or just made)
    prefilling: set[int] = field(default_factory=set)  # episodes reading their turn ahead
    released: set[int] = field(default_factory=set)  # ended episodes: rows to drop
    running: bool = False
    idle_since: float = 0.0  # when the last batch ended: a wait counts from then


class EpisodeBatcher:
    """Samples the turns of concurrent episodes of ``model`` in batches (module docstring).

    Args:
        model, tokenizer: the checkpoint and its tokenizer (stop ids: the model's and
            tokenizer's EOS ids, as a batch-1 agent's).
        temperature: 0 decodes greedily; above 0 each episode samples from its own generator.
        batch_size: the most episodes of one forward pass.
        flush_s: how long a pending turn waits for other episodes' turns at most (it
            waits for a turn being prefilled in any case: it is pending next).

    Raises:
        ConfigError: a negative temperature, ``batch_size`` below 1 or a negative ``flush_s``.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        temperature: float = 0.0,
        batch_size: int = 8,
        flush_s: float = 0.01,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        if not flush_s >= 0:
            raise ConfigError(f"flush_s must be >= 0, got {flush_s!r}")
        self.model = model
        self.temperature = float(temperature)
        self.batch_size = batch_size
        self.flush_s = float(flush_s)
        self.stop_ids = frozenset(stop_token_ids(model, tokenizer))
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad) if pad is not None else 0
        SamplingRule(stop_ids=self.stop_ids, pad_id=self.pad_id, temperature=self.temperature)
        self._setup()

    def _setup(self) -> None:
        self._cond = threading.Condition()
        self._queue = _Queue()
        self._rows = EpisodeRows(self.model)
        self._keys = itertools.count(1)
        self.batches: list[int] = []  # the size of every batch sampled, in order

    def __getstate__(self) -> dict[str, Any]:
        """The settings only (a Ray worker builds its own queue and caches)."""
        keep = ("model", "temperature", "batch_size", "flush_s", "stop_ids", "pad_id")
        return {name: getattr(self, name) for name in keep}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._setup()

    # -- state -----------------------------------------------------------------------
    @property
    def ids_fed(self) -> int:
        """Ids run through the model so far (padding excluded)."""
        return self._rows.ids_fed

    @property
    def prefilled(self) -> int:
        """Turns whose new ids were fed in a forward pass of their own so far (not padded to)."""
        return self._rows.prefilled

    @property
    def in_flight(self) -> int:
        """Handles the batcher waits for (agents in an episode, or just built)."""
        return len(self._queue.active)

    @property
    def cached_episodes(self) -> int:
        """How many episodes hold a cache now."""
        return sum(len(group.keys) for group in self._rows.groups)

    def generator(self, seed: int) -> BatchedGenerator:
        """One agent's handle: its own sampling stream seeded with ``seed``."""
        return BatchedGenerator(self, seed)

    def new_key(self, *, handle: bool = False) -> int:
        """A key for a new episode or (``handle``) a new agent's handle, in flight from now
        (keys are never reused)."""
        with self._cond:
            key = next(self._keys)
            if handle:
                self._queue.active.add(key)
            return key

    def release(self, handle: int, key: int | None) -> None:
        """``handle``'s episode ``key`` has ended: the handle is no longer waited for, and
        the episode's cache row is dropped (after the batch running now, if any)."""
        with self._cond:
            self._queue.active.discard(handle)
            if key is not None:
                self._queue.released.add(key)
            if not self._queue.running:  # no batch touches the rows now: free them at once
                self._rows.drop(self._queue.released)
                self._queue.released = set()
            self._cond.notify_all()

    # -- one turn ----------------------------------------------------------------------
    def sample(
        self,
        handle: int,
        key: int,
        context: Sequence[int],
        max_new_tokens: int,
        rng: torch.Generator | None,
    ) -> Generation:
        """Episode ``key``'s next response after ``context`` (blocks until its batch ran);
        ``handle`` (:meth:`new_key`) is in flight until it is released.


        Raises:
            ConfigError: an empty context, ``max_new_tokens`` below 1, or a second request
                of an episode that has one pending.
            Exception: whatever sampling this request alone raised.
        """
        if not context:
            raise ConfigError("the context is empty: a generation needs at least one id")
        if max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens must be >= 1, got {max_new_tokens!r}")
        req = _Request(handle, key, list(context), max_new_tokens, rng, 0.0)
        queue = self._queue
        with self._cond:
            if key in queue.prefilling or any(r.key == key for r in queue.pending):
                raise ConfigError(f"episode {key} already has a turn pending")
            queue.active.add(handle)
            queue.prefilling.add(key)
        try:
            req.prefill = self._rows.prefill(key, req.context)
        except BaseException:  # the request fails alone, never queued
            with self._cond:
                queue.prefilling.discard(key)
                self._cond.notify_all()
            raise
        with self._cond:
            queue.prefilling.discard(key)
            req.since = time.monotonic()
            queue.pending.append(req)
            self._cond.notify_all()
        while True:
            with self._cond:
                while not req.finished and (queue.running or not self._ready()):
                    self._cond.wait(self._wait_s())
                if req.finished:
                    break
                batch, gone = self._take()
            self._lead(batch, gone)
        if req.error is not None:
            raise req.error
        assert req.result is not None
        return req.result

    def _ready(self) -> bool:
        pending = self._queue.pending
        if not pending:
            return False
        if len(pending) >= min(self.batch_size, len(self._queue.active)):
            return True  # a full batch, or every episode in flight has its turn pending
        # a turn being prefilled is pending in a moment: the batch waits for it
        return not self._queue.prefilling and time.monotonic() >= self._deadline()

    def _deadline(self) -> float:
        # Counted from the end of the last batch too: turns that waited while it ran then
        # wait for its episodes to come back, so two halves never settle into alternation.
        return max(self._queue.pending[0].since, self._queue.idle_since) + self.flush_s

    def _wait_s(self) -> float | None:
        if self._queue.running or not self._queue.pending or self._queue.prefilling:
            return None  # woken when the batch ends, a turn arrives or a prefill ends
        return max(1e-4, self._deadline() - time.monotonic())

    def _take(self) -> tuple[list[_Request], set[int]]:
        queue = self._queue
        batch, queue.pending = queue.pending[: self.batch_size], queue.pending[self.batch_size :]
        gone, queue.released = queue.released, set()
        queue.running = True
        return batch, gone

    def _lead(self, batch: list[_Request], gone: set[int]) -> None:
        """Sample ``batch`` (this thread leads it), then wake every waiting thread."""
        try:
            self._rows.drop(gone)
            self._sample_isolated(batch)
        except BaseException as exc:  # an interrupt: no request of the batch is left waiting
            for req in batch:
                if req.result is None and req.error is None:
                    req.error = exc
            raise
        finally:
            with self._cond:
                for req in batch:
                    req.finished = True
                self._queue.running = False
                self._queue.idle_since = time.monotonic()
                self.batches.append(len(batch))
                self._cond.notify_all()

    def _sample_isolated(self, batch: list[_Request]) -> None:
        states = [None if r.rng is None else r.rng.get_state() for r in batch]
        try:
            gens = self._rows.sample(batch, self._rules(batch))
        except Exception as exc:
            if len(batch) == 1:
                batch[0].error = exc
                return
            for req, state in zip(batch, states, strict=True):
                if req.rng is not None and state is not None:
                    req.rng.set_state(state)
                try:
                    (req.result,) = self._rows.sample([req], self._rules([req]))
                except Exception as alone:
                    req.error = alone
            return
        for req, gen in zip(batch, gens, strict=True):
            req.result = gen

    def _rules(self, batch: Sequence[_Request]) -> list[SamplingRule]:
        return [
            SamplingRule(
                stop_ids=self.stop_ids,
                pad_id=self.pad_id,
                temperature=self.temperature,
                generator=r.rng,
            )
            for r in batch
        ]


class BatchedGenerator:
    """One agent's handle on an :class:`EpisodeBatcher`, with ``ModelGenerator``'s
    ``generate_ids`` and ``reset``: its own sampling stream (``generator``, a
    ``torch.Generator`` seeded with ``seed``, as ``ModelGenerator.seeded``'s), one episode
    at a time.

    The batcher waits for a handle's turn from its creation (an evaluator builds an agent
    just before playing it) until ``reset`` (an episode ended, or the agent's ``start``)
    and again from its next turn; garbage collection of the handle releases it too, so an
    evaluator's agent that is dropped after its last turn is not waited for.
    """

    def __init__(self, batcher: EpisodeBatcher, seed: int) -> None:
        self.batcher = batcher
        self.generator = torch.Generator().manual_seed(seed)
        self._handle = batcher.new_key(handle=True)
        self._episode: list[int | None] = [None]  # shared with the finalizer
        self._local: Hashable | None = None
        weakref.finalize(self, _end, batcher, self._handle, self._episode)

    @property
    def sampler(self) -> EpisodeBatcher:
        """The batcher (``ids_fed`` and ``cached_episodes``, as a sampler's)."""
        return self.batcher

    def reset(self) -> None:
        """End the current episode (its cache is dropped before the next batch)."""
        _end(self.batcher, self._handle, self._episode)
        self._local = None

    def generate_ids(
        self,
        contexts: Sequence[Sequence[int]],
        max_new_tokens: int,
        episodes: Sequence[Hashable | None] | None = None,
    ) -> list[Generation]:
        """The next response after the one context in ``contexts``; ``episodes[0]`` keys
        the agent's episode (another key starts a new one; ``None`` re-reads the context
        and keeps nothing).

        Raises:
            ConfigError: not exactly one context, or a bad context (see
                :meth:`EpisodeBatcher.sample`).
        """
        if len(contexts) != 1 or (episodes is not None and len(episodes) != 1):
            raise ConfigError("a batched agent's generator takes one context per call")
        local = None if episodes is None else episodes[0]
        if local is None or local != self._local:
            self.reset()
            self._local = local
        key = self._episode[0]
        if key is None:
            key = self._episode[0] = self.batcher.new_key()
        rng = self.generator if self.batcher.temperature > 0 else None
        try:
            gen = self.batcher.sample(self._handle, key, contexts[0], max_new_tokens, rng)
        finally:
            if local is None:
                self.reset()
        return [gen]


def _end(batcher: EpisodeBatcher, handle: int, episode: list[int | None]) -> None:
    key, episode[0] = episode[0], None
    batcher.release(handle, key)
