"""A trained causal LM as a batched diagnostics policy (``points -> action texts``).

The model sees exactly what it saw in training rollouts: the chat of the
decision point (instructions, then observation + budget notice messages and its
own earlier replies) rendered by the tokenizer's chat template, ending with the
assistant generation prompt. Replies are sampled (temperature as in training)
with the trainer's batched :class:`~budgetmix.training.rollouts.generation.ModelGenerator`
from a seeded generator, so a policy's actions are reproducible.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from budgetmix.ledger import LedgerState, fixed_clock_ledger
from budgetmix.training.diagnostics.episodes import DecisionPoint, Policy

__all__ = ["LMPolicy", "load_lm_policy", "next_token_probabilities"]


def _ledger_state(point: DecisionPoint) -> LedgerState:
    ledger = fixed_clock_ledger(point.turns_total)
    for _ in range(point.turn):
        ledger.try_charge_turn()
    return ledger.state(in_turn=True)


class LMPolicy:
    """Sample one reply per decision point from ``model`` (a batched :data:`Policy`).

    Args:
        model: a causal LM (eval mode is set while sampling).
        tokenizer: its tokenizer, with the chat template used in training.
        temperature: sampling temperature (1.0 = the distribution RL trained).
        max_new_tokens: reply length limit; a reply cut off there is returned as is.
        batch_size: decision points per forward pass.
        seed: seeds the sampling generator.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        temperature: float = 1.0,
        max_new_tokens: int = 3,
        batch_size: int = 128,
        seed: int = 0,
    ) -> None:
        from budgetmix.training.rollouts.chat import ChatCodec
        from budgetmix.training.rollouts.generation import ModelGenerator

        self.codec = ChatCodec(tokenizer)
        self.max_new_tokens = max_new_tokens
        self._ids: dict[tuple[str, int, int, int], int] = {}
        self.generator = ModelGenerator.seeded(
            model, tokenizer, temperature=temperature, batch_size=batch_size, seed=seed
        )

    def _keys(self, points: Sequence[DecisionPoint]) -> list[int]:
        seen: dict[tuple[str, int, int], int] = {}
        keys = []
        for p in points:
            episode = (p.task_id, p.seed, p.turns_total)
            n = seen[episode] = seen.get(episode, -1) + 1
            keys.append(self._ids.setdefault((*episode, n), len(self._ids)))
        return keys

    def __call__(self, points: Sequence[DecisionPoint]) -> list[str]:
        """One sampled reply per point (the EOS token stripped).

        Each episode (task, seed, budget; the n-th such point of a call) keeps its KV
        cache from one call to the next: the next turn of an episode feeds only its
        new ids, and the same points asked again
        (:func:`~budgetmix.training.diagnostics.action_quality.expected_q`) feed only the sampled
        ids again. The sampler rewinds a cache to the longest common prefix, so a key
        that meets another context still samples it exactly.
        """
        from budgetmix.training.rollouts.generation import GenerationRequest

        if not points:
            return []
        requests = [
            GenerationRequest(
                self.codec.encode(
                    self.codec.render([dict(m) for m in p.messages], generation_prompt=True)
                ),
                cast(Any, None),  # ModelGenerator reads only the context ids
                p.messages[-1]["content"],
                _ledger_state(p),
                episode=key,
            )
            for p, key in zip(points, self._keys(points), strict=True)
        ]
        out = []
        for gen in self.generator.generate(requests, self.max_new_tokens):
            ids = gen.ids[:-1] if gen.stopped else gen.ids
            out.append(self.codec.decode(ids))
        return out


def load_lm_policy(path: str | Path, **kwargs: Any) -> tuple[Policy, Any, Any]:
    """``(policy, model, tokenizer)`` for a saved model directory (``save_pretrained``).

    Raises:
        ConfigError: ``path`` is not a model directory.
        MissingExtraError: torch/transformers are not installed.
    """
    from budgetmix.training.data.models import load_pretrained

    model, tokenizer = load_pretrained(path)
    model.eval()
    return LMPolicy(model, tokenizer, **kwargs), model, tokenizer


def next_token_probabilities(
    policy: LMPolicy, model: Any, points: Sequence[DecisionPoint], tokens: Sequence[str]
) -> list[dict[str, float]]:
    """Per point, the model's exact probability (temperature 1) of each of ``tokens`` as
    the first id of its reply: what the sampled sensitivity estimates, without
    sampling noise.

    Points whose notices differ only in the numbers and get *identical* distributions
    show what the model reads of the notice: on the experiment's char-level model the
    start move is the same for every one-digit count of turns left and for every
    two-digit one (docs/experiment.md).

    Raises:
        ConfigError: a token that is not one id of the tokenizer.
    """
    import torch
    from budgetmix.exceptions import ConfigError

    tokenizer = policy.codec.tokenizer
    ids = {}
    for t in tokens:
        enc = tokenizer.encode(t, add_special_tokens=False)
        if len(enc) != 1:
            raise ConfigError(f"tokens: {t!r} is not one token of this tokenizer")
        ids[t] = enc[0]
    out = []
    with torch.no_grad():
        for p in points:
            ctx = policy.codec.encode(
                policy.codec.render([dict(m) for m in p.messages], generation_prompt=True)
            )
            probs = torch.softmax(model(torch.tensor([ctx])).logits[0, -1].float(), dim=-1)
            out.append({t: float(probs[i]) for t, i in ids.items()})
    return out
