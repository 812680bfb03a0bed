"""Token generators: batched KV-cache sampling from a causal LM, and scripted demonstrations.

A generator receives the context ids of every active episode and returns the
sampled ids with their log-probabilities. :class:`ModelGenerator` samples all
episodes of a batch in one forward pass per token and keeps each episode's KV
cache from one turn to the next (:mod:`budgetmix.training.rollouts.sampler`), so a
turn costs only its new ids. :class:`ScriptedGenerator` asks a
scripted agent for its reply and writes it as the chat template's canonical
rendering of that assistant message, so demonstrations for SFT have exactly
the token layout of sampled rollouts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import torch
from budgetmix.environment import Environment
from budgetmix.exceptions import ConfigError
from budgetmix.ledger import LedgerState
from budgetmix.training.envs.demo import DemoReply
from budgetmix.training.rollouts.sampler import (
    Generation,
    KVCacheSampler,
    SamplingRule,
    stop_token_ids,
)

if TYPE_CHECKING:
    from budgetmix.adapters.base import ToolSpec
    from budgetmix.training.rollouts.chat import ChatCodec

__all__ = [
    "DemoAgent",
    "DemoReply",
    "Generation",
    "GenerationRequest",
    "ModelGenerator",
    "ScriptedGenerator",
    "TokenGenerator",
]


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """One active episode asking for its next response.

    ``episode`` keys the episode's KV cache in :class:`ModelGenerator` (unique
    among the requests of one call); ``None`` re-reads the whole context.
    ``messages`` and ``tools`` are the chat so far (OpenAI-style rows) and the
    tools it is rendered with, which a demonstrator's reply is rendered after.
    """

    context_ids: Sequence[int]
    env: Environment
    message: str
    state: LedgerState
    episode: int | None = None
    messages: Sequence[Mapping[str, Any]] = ()
    tools: Sequence[ToolSpec] = ()


class TokenGenerator(Protocol):
    """Produces the next response of every request, in order."""

    def generate(
        self, requests: Sequence[GenerationRequest], max_new_tokens: int
    ) -> list[Generation]:
        """One generation of at most ``max_new_tokens`` ids per request, in request order."""
        ...


#: A scripted agent: the request (live environment, latest message, ledger state, chat so
#: far) -> its reply: the action text, or an assistant message (``content`` and
#: ``tool_calls`` with ``{"function": {"name", "arguments": <dict>}}`` entries), either
#: bare or in a :class:`DemoReply`.
DemoAgent = Callable[[GenerationRequest], "str | Mapping[str, Any] | DemoReply"]


class ScriptedGenerator:
    """Generations written by a scripted agent (demonstrations, tests); log-probs are 0.

    With a :class:`~budgetmix.training.rollouts.chat.ChatCodec` the reply is the template's
    canonical rendering of the agent's assistant message after the request's chat
    (its end-of-turn token included); with a bare tokenizer, the encoded text
    followed by the tokenizer's EOS.
    """

    def __init__(self, agent: DemoAgent, codec: ChatCodec | Any) -> None:
        from budgetmix.training.rollouts.chat import ChatCodec

        self.agent = agent
        self.codec: ChatCodec | None = codec if isinstance(codec, ChatCodec) else None
        self.tokenizer: Any = codec.tokenizer if self.codec is not None else codec
        self.eos: int = (
            self.codec.eos_token_id if self.codec is not None else int(codec.eos_token_id)
        )

    def _reply_ids(self, req: GenerationRequest) -> tuple[list[int], bool]:
        said = self.agent(req)
        if isinstance(said, DemoReply):
            return self._ids(req, said.reply), said.imitate
        return self._ids(req, said), True

    def _ids(self, req: GenerationRequest, reply: str | Mapping[str, Any]) -> list[int]:
        if self.codec is not None:
            row = {"role": "assistant", "content": reply} if isinstance(reply, str) else reply
            return self.codec.reply_ids(req.messages, row, req.tools)
        if not isinstance(reply, str):
            raise ConfigError(
                "ScriptedGenerator: a message reply needs a ChatCodec, not a tokenizer"
            )
        return [*self.tokenizer.encode(reply, add_special_tokens=False), self.eos]

    def generate(
        self, requests: Sequence[GenerationRequest], max_new_tokens: int
    ) -> list[Generation]:
        """The agent's reply for each request as ids ending with the stop id; cut at
        ``max_new_tokens`` ids (then not ``stopped``); a :class:`DemoReply`'s ``imitate``
        is kept."""
        out = []
        for req in requests:
            ids, imitate = self._reply_ids(req)
            stopped = len(ids) <= max_new_tokens
            ids = ids[:max_new_tokens]
            out.append(Generation(tuple(ids), (0.0,) * len(ids), stopped, imitate))
        return out


class ModelGenerator:
    """Batched sampling from a causal LM, each episode's KV cache kept across turns.

    A request with an ``episode`` key reuses that episode's cache from the
    previous call: only the ids after what the cache holds are fed (rewound to
    the common prefix when the context is not an extension). A request without
    one re-reads its context. Caches of episodes absent from a call are
    dropped; :meth:`reset` drops them all (do so whenever the weights change).

    ``stop_token_ids``: every id that ends a response (``eos_token_id`` is
    added to them; :func:`~budgetmix.training.rollouts.sampler.stop_token_ids` reads a
    model's and tokenizer's). ``temperature`` scales logits before sampling;
    the recorded log-probs are of the tempered distribution, the one the loss
    uses. ``temperature=0`` decodes greedily. ``generator`` makes sampling
    reproducible (its state is checkpointed by the trainer).

    Raises:
        ConfigError: no stop id, a negative temperature or a batch size below 1.
    """

    def __init__(
        self,
        model: Any,
        *,
        pad_token_id: int,
        stop_token_ids: Sequence[int] = (),
        eos_token_id: int | None = None,
        temperature: float = 1.0,
        batch_size: int = 64,
        generator: torch.Generator | None = None,
    ) -> None:
        stops = [int(t) for t in stop_token_ids]
        if eos_token_id is not None and int(eos_token_id) not in stops:
            stops.insert(0, int(eos_token_id))
        if not stops:
            raise ConfigError("ModelGenerator: give stop_token_ids or eos_token_id")
        self.model = model
        self.stop_ids = tuple(stops)
        self.pad = pad_token_id
        self.temperature = temperature
        self.batch_size = batch_size
        self.generator = generator
        rule = SamplingRule(
            stop_ids=frozenset(stops),
            pad_id=pad_token_id,
            temperature=temperature,
            generator=generator,
        )
        self.sampler = KVCacheSampler(model, rule, batch_size=batch_size)

    @property
    def eos(self) -> int:
        """The id that closes a response the generator cut (``eos_token_id``, else the first
        stop id)."""
        return self.stop_ids[0]

    @classmethod
    def seeded(
        cls, model: Any, tokenizer: Any, *, temperature: float, batch_size: int, seed: int
    ) -> ModelGenerator:
        """A generator for ``model`` stopping at its and ``tokenizer``'s EOS ids, padding with
        the tokenizer's pad (0 when it has none), with its own sampling stream seeded by
        ``seed`` (serving, diagnostics)."""
        pad = tokenizer.pad_token_id
        return cls(
            model,
            eos_token_id=int(tokenizer.eos_token_id),
            stop_token_ids=stop_token_ids(model, tokenizer),
            pad_token_id=int(pad) if pad is not None else 0,
            temperature=temperature,
            batch_size=batch_size,
            generator=torch.Generator().manual_seed(seed),
        )

    def reset(self) -> None:
        """Drop every episode's cache."""
        self.sampler.reset()

    def generate(
        self, requests: Sequence[GenerationRequest], max_new_tokens: int
    ) -> list[Generation]:
        """Sample the next response from each request's context ids (see :meth:`generate_ids`)."""
        return self.generate_ids(
            [r.context_ids for r in requests], max_new_tokens, [r.episode for r in requests]
        )

    def generate_ids(
        self,
        contexts: Sequence[Sequence[int]],
        max_new_tokens: int,
        episodes: Sequence[int | None] | None = None,
    ) -> list[Generation]:
        """Next response for each context of token ids (serving needs no env or ledger);
        ``episodes`` keys their caches (default: none, every context is re-read).

        Raises:
            ConfigError: an empty context, an episode key twice, or mismatched lengths.
        """
        keys = [None] * len(contexts) if episodes is None else list(episodes)
        return self.sampler.sample(contexts, keys, max_new_tokens)
