"""GRPO and RLOO: group-relative advantages and the clipped policy loss, normalised per rollout.

Differences from the GRPO paper, on purpose:

* the loss is averaged over a rollout's sampled tokens first, then over
  rollouts ("normalise per rollout"), because rollout lengths vary with the
  budget T and a token-level mean would weight long-budget rollouts more;
* groups share task and seed; with ``group_budgets="mixed"`` a group's
  baseline also mixes budgets (see docs/training.md for the trade-off);
* the KL term (k3 estimator, off by default) is against a frozen reference model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from budgetmix.exceptions import ConfigError
from budgetmix.training.rollouts.rollout import Rollout

__all__ = [
    "PolicyLossOutput",
    "SequenceBatch",
    "group_advantages",
    "policy_loss",
    "sequence_batch",
    "sft_loss",
    "token_logprobs",
]

Estimator = Literal["grpo", "rloo"]


def group_advantages(
    rewards: Sequence[float],
    groups: Sequence[int],
    *,
    estimator: Estimator = "grpo",
    scale_rewards: bool = True,
    eps: float = 1e-6,
) -> list[float]:
    """One advantage per rollout, relative to the other rollouts of its group.

    GRPO: ``(r - mean(group)) / (std(group) + eps)`` (population std; without
    ``scale_rewards`` only the mean is subtracted). RLOO: ``r`` minus the mean
    of the *other* rollouts of the group. A group of one gets advantage 0.

    Raises:
        ConfigError: unknown estimator or mismatched lengths.
    """
    if estimator not in ("grpo", "rloo"):
        raise ConfigError(f"estimator must be grpo or rloo, got {estimator!r}")
    if len(rewards) != len(groups):
        raise ConfigError("rewards and groups must have the same length")
    members: dict[int, list[int]] = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    out = [0.0] * len(rewards)
    for idx in members.values():
        rs = [float(rewards[i]) for i in idx]
        n = len(rs)
        if n < 2:
            continue
        mean = sum(rs) / n
        if estimator == "rloo":
            for i, r in zip(idx, rs, strict=True):
                out[i] = r - (sum(rs) - r) / (n - 1)
            continue
        std = (sum((r - mean) ** 2 for r in rs) / n) ** 0.5
        for i, r in zip(idx, rs, strict=True):
            out[i] = (r - mean) / (std + eps) if scale_rewards else r - mean
    return out


@dataclass(frozen=True, slots=True)
class SequenceBatch:
    """Right-padded prompt+response ids with masks aligned to next-token targets.

    ``loss_mask[b, t]`` is 1 when target token ``input_ids[b, t + 1]`` was
    sampled by the policy; ``sampler_logprobs`` holds the rollout's recorded
    log-probs at the same positions.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    loss_mask: torch.Tensor
    sampler_logprobs: torch.Tensor


def sequence_batch(rollouts: Sequence[Rollout], pad_token_id: int) -> SequenceBatch:
    """Pack rollouts for a training forward pass."""
    seqs = [list(r.prompt_ids) + list(r.response_ids) for r in rollouts]
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_token_id, dtype=torch.long)
    attn = torch.zeros((len(seqs), width), dtype=torch.long)
    mask = torch.zeros((len(seqs), width - 1), dtype=torch.float32)
    logps = torch.zeros((len(seqs), width - 1), dtype=torch.float32)
    for b, (seq, r) in enumerate(zip(seqs, rollouts, strict=True)):
        ids[b, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        attn[b, : len(seq)] = 1
        start = len(r.prompt_ids) - 1  # target index of the first response token
        n = len(r.response_ids)
        mask[b, start : start + n] = torch.tensor(r.response_mask, dtype=torch.float32)
        logps[b, start : start + n] = torch.tensor(r.logprobs, dtype=torch.float32)
    return SequenceBatch(ids, attn, mask, logps)


def token_logprobs(model: Any, batch: SequenceBatch, *, temperature: float = 1.0) -> torch.Tensor:
    """Log-prob of every next token under ``model`` (shape ``[B, T-1]``)."""
    device = next(model.parameters()).device
    out = model(
        input_ids=batch.input_ids.to(device), attention_mask=batch.attention_mask.to(device)
    )
    logits = out.logits[:, :-1, :].float() / temperature
    targets = batch.input_ids[:, 1:].to(device)
    return torch.log_softmax(logits, dim=-1).gather(-1, targets[..., None]).squeeze(-1)


def _per_rollout_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)


@dataclass(frozen=True, slots=True)
class PolicyLossOutput:
    """The loss to back-propagate and detached statistics for the log."""

    loss: torch.Tensor
    kl: float
    clip_fraction: float
    ratio_mean: float


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
    ref_logprobs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
) -> PolicyLossOutput:
    """Clipped-ratio policy-gradient loss with optional k3 KL, normalised per rollout.

    Per token: ``-min(ratio * A, clip(ratio, 1 - eps, 1 + eps_high) * A)``
    plus ``kl_coef * (exp(ref - logp) - (ref - logp) - 1)``; averaged over each
    rollout's masked tokens, then over rollouts. ``advantages`` has shape ``[B]``.
    """
    high = clip_eps if clip_eps_high is None else clip_eps_high
    ratio = torch.exp(logprobs - old_logprobs)
    adv = advantages[:, None]
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + high) * adv
    per_token = -torch.minimum(unclipped, clipped)
    kl_value = 0.0
    if ref_logprobs is not None and kl_coef > 0.0:
        delta = ref_logprobs - logprobs
        kl = torch.exp(delta) - delta - 1.0
        per_token = per_token + kl_coef * kl
        kl_value = float(_per_rollout_mean(kl.detach(), mask).mean())
    loss = _per_rollout_mean(per_token, mask).mean()
    with torch.no_grad():
        was_clipped = ((clipped < unclipped).float() * mask).sum() / mask.sum().clamp(min=1.0)
        ratio_mean = (ratio * mask).sum() / mask.sum().clamp(min=1.0)
    return PolicyLossOutput(loss, kl_value, float(was_clipped), float(ratio_mean))


def sft_loss(logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Negative log-likelihood of the masked (demonstrated) tokens, normalised per rollout."""
    return -_per_rollout_mean(logprobs, mask).mean()
