"""Token generators: batched KV-cache sampling from a causal LM, and scripted demonstrations.

A generator receives the context ids of every active episode and returns the
sampled ids with their log-probabilities. :class:`ModelGenerator` samples all
episodes of a batch in one forward pass per token (left padding, explicit
position ids, the model's KV cache). :class:`ScriptedGenerator` asks a
scripted agent for the action text and encodes it, so demonstrations for SFT
have exactly the token layout of sampled rollouts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from budgetmix.environment import Environment
from budgetmix.ledger import LedgerState


def _cache_kwarg() -> str:
    # transformers 5.x renamed past_key_values to cache; support both spellings.
    from transformers.modeling_outputs import CausalLMOutputWithPast

    return "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"


_CACHE_KWARG = _cache_kwarg()


def _cache_of(result: Any) -> Any:
    return getattr(result, _CACHE_KWARG)


__all__ = [
    "DemoAgent",
    "Generation",
    "GenerationRequest",
    "ModelGenerator",
    "ScriptedGenerator",
    "TokenGenerator",
]


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """One active episode asking for its next response."""

    context_ids: Sequence[int]
    env: Environment
    message: str
    state: LedgerState


@dataclass(frozen=True, slots=True)
class Generation:
    """Sampled ids (including the EOS when ``stopped``) and one log-prob per id."""

    ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    stopped: bool


class TokenGenerator(Protocol):
    """Produces the next response of every request, in order."""

    def generate(
        self, requests: Sequence[GenerationRequest], max_new_tokens: int
    ) -> list[Generation]:
        """One generation of at most ``max_new_tokens`` ids per request, in request order."""
        ...


#: A scripted agent: the request (live environment, latest message, ledger state) -> action text.
DemoAgent = Callable[[GenerationRequest], str]


class ScriptedGenerator:
    """Generations written by a scripted agent (demonstrations, tests); log-probs are 0."""

    def __init__(self, agent: DemoAgent, tokenizer: Any) -> None:
        self.agent = agent
        self.tokenizer = tokenizer
        self.eos: int = int(tokenizer.eos_token_id)

    def generate(
        self, requests: Sequence[GenerationRequest], max_new_tokens: int
    ) -> list[Generation]:
        """The agent's action text for each request, encoded and ended with EOS; cut at
        ``max_new_tokens`` ids (then not ``stopped``)."""
        out = []
        for req in requests:
            ids = [*self.tokenizer.encode(self.agent(req), add_special_tokens=False)]
            ids.append(self.eos)
            stopped = len(ids) <= max_new_tokens
            ids = ids[:max_new_tokens]
            out.append(Generation(tuple(ids), (0.0,) * len(ids), stopped))
        return out


class ModelGenerator:
    """Batched sampling from a causal LM with its KV cache.

    ``temperature`` scales logits before sampling; the recorded log-probs are
    of the tempered distribution, the one the loss uses. ``temperature=0``
    decodes greedily. ``generator`` makes
    sampling reproducible (its state is checkpointed by the trainer).
    """

    def __init__(
        self,
        model: Any,
        *,
        eos_token_id: int,
        pad_token_id: int,
        temperature: float = 1.0,
        batch_size: int = 64,
        generator: torch.Generator | None = None,
    ) -> None:
        self.model = model
        self.eos = eos_token_id
        self.pad = pad_token_id
        self.temperature = temperature
        self.batch_size = batch_size
        self.generator = generator

    @classmethod
    def seeded(
        cls, model: Any, tokenizer: Any, *, temperature: float, batch_size: int, seed: int
    ) -> ModelGenerator:
        """A generator for ``model`` with ``tokenizer``'s EOS and padding (0 when it has
        none) and its own sampling stream seeded by ``seed`` (serving, diagnostics)."""
        pad = tokenizer.pad_token_id
        return cls(
            model,
            eos_token_id=int(tokenizer.eos_token_id),
            pad_token_id=int(pad) if pad is not None else 0,
            temperature=temperature,
            batch_size=batch_size,
            generator=torch.Generator().manual_seed(seed),
        )

    def generate(
        self, requests: Sequence[GenerationRequest], max_new_tokens: int
    ) -> list[Generation]:
        """Sample the next response from each request's context ids (see :meth:`generate_ids`)."""
        return self.generate_ids([r.context_ids for r in requests], max_new_tokens)

    def generate_ids(
        self, contexts: Sequence[Sequence[int]], max_new_tokens: int
    ) -> list[Generation]:
        """Next response for each context of token ids (serving needs no env or ledger)."""
        out: list[Generation] = []
        for start in range(0, len(contexts), self.batch_size):
            chunk = [list(c) for c in contexts[start : start + self.batch_size]]
            out.extend(self._generate_batch(chunk, max_new_tokens))
        return out

    @torch.no_grad()
    def _generate_batch(self, contexts: list[list[int]], max_new_tokens: int) -> list[Generation]:
        device = next(self.model.parameters()).device
        width = max(len(c) for c in contexts)
        ids = torch.full((len(contexts), width), self.pad, dtype=torch.long)
        attn = torch.zeros((len(contexts), width), dtype=torch.long)
        for row, ctx in enumerate(contexts):  # left padding: every row ends at the same column
            ids[row, width - len(ctx) :] = torch.tensor(ctx, dtype=torch.long)
            attn[row, width - len(ctx) :] = 1
        ids, attn = ids.to(device), attn.to(device)
        positions = (attn.cumsum(-1) - 1).clamp(min=0)
        was_training = self.model.training
        self.model.eval()
        try:
            result = self.model(
                input_ids=ids, attention_mask=attn, position_ids=positions, use_cache=True
            )
            past = _cache_of(result)
            logits = result.logits[:, -1, :]
            next_pos = positions[:, -1] + 1
            done = torch.zeros(len(contexts), dtype=torch.bool, device=device)
            sampled: list[torch.Tensor] = []
            logps: list[torch.Tensor] = []
            for _ in range(max_new_tokens):
                if self.temperature == 0.0:  # greedy decoding (serving, evaluation)
                    logp = torch.log_softmax(logits.float(), dim=-1)
                    tok = logp.argmax(dim=-1)
                else:
                    logp = torch.log_softmax(logits.float() / self.temperature, dim=-1)
                    tok = torch.multinomial(logp.exp().cpu(), 1, generator=self.generator)
                    tok = tok.to(device).squeeze(-1)
                tok = torch.where(done, torch.full_like(tok, self.pad), tok)
                sampled.append(tok)
                logps.append(logp.gather(-1, tok[:, None]).squeeze(-1))
                done = done | (tok == self.eos)
                if bool(done.all()):
                    break
                attn = torch.cat([attn, torch.ones_like(attn[:, :1])], dim=-1)
                result = self.model(
                    input_ids=tok[:, None],
                    attention_mask=attn,
                    position_ids=next_pos[:, None],
                    use_cache=True,
                    **{_CACHE_KWARG: past},
                )
                past = _cache_of(result)
                logits = result.logits[:, -1, :]
                next_pos = next_pos + 1
        finally:
            self.model.train(was_training)
        toks = torch.stack(sampled, dim=1).cpu().tolist()
        lps = torch.stack(logps, dim=1).cpu().tolist()
        out = []
        for row_toks, row_lps in zip(toks, lps, strict=True):
            n = row_toks.index(self.eos) + 1 if self.eos in row_toks else len(row_toks)
            out.append(Generation(tuple(row_toks[:n]), tuple(row_lps[:n]), self.eos in row_toks))
        return out
