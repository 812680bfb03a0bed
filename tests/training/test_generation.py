"""Batched KV-cache sampling: log-probs equal a plain forward pass; left padding is harmless."""

from __future__ import annotations

import random
from typing import Any

import torch
from budgetmix.policies.samplers import BudgetMix
from budgetmix.training.algorithms.objectives import sequence_batch, token_logprobs
from budgetmix.training.envs import env_tasks
from budgetmix.training.rollouts.chat import ChatCodec
from budgetmix.training.rollouts.generation import ModelGenerator
from budgetmix.training.rollouts.rollout import EpisodeSpec, RolloutSettings, run_rollouts


def test_sampled_logprobs_match_a_full_forward(tokenizer: Any, tiny_model: Any) -> None:
    codec = ChatCodec(tokenizer)
    sampler = BudgetMix(ceiling=4)
    rng = random.Random(0)
    specs = [
        EpisodeSpec(task=t, budget=sampler.sample(rng), group=i)
        for i, t in enumerate(env_tasks("echo", range(12), {"max_len": 3}))
    ]
    gen = ModelGenerator(
        tiny_model,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        batch_size=5,
        generator=torch.Generator().manual_seed(0),
    )
    settings = RolloutSettings(max_new_tokens=6, token_check="strict", notice_format="v1")
    rollouts = run_rollouts(specs, gen, codec, settings)
    assert {r.termination for r in rollouts} <= {
        "length",
        "budget_exhausted",
        "format_error",
        "failure",
        "success",
    }
    batch = sequence_batch(rollouts, tokenizer.pad_token_id)
    with torch.no_grad():
        full = token_logprobs(tiny_model, batch)
    mask = batch.loss_mask.bool()
    assert mask.sum() == sum(r.sampled_tokens for r in rollouts)
    torch.testing.assert_close(full[mask], batch.sampler_logprobs[mask], atol=2e-4, rtol=0)


def test_sampling_is_reproducible(tokenizer: Any, tiny_model: Any) -> None:
    codec = ChatCodec(tokenizer)
    specs = [
        EpisodeSpec(task=t, budget=BudgetMix(ceiling=2).sample(random.Random(1)))
        for t in env_tasks("echo", range(4), {})
    ]

    def once() -> list[tuple[int, ...]]:
        gen = ModelGenerator(
            tiny_model,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
            generator=torch.Generator().manual_seed(7),
        )
        return [r.response_ids for r in run_rollouts(specs, gen, codec, RolloutSettings())]

    assert once() == once()
