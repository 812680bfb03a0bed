"""A thin adapter so TRL's ``GRPOTrainer`` trains on budgetmix's budget-aware multi-turn rollouts.

TRL calls ``rollout_func(prompts, trainer)`` with the prompts of its batch,
each repeated ``num_generations`` times in a row, and expects
``prompt_ids``, ``completion_ids``, ``logprobs`` and optionally ``env_mask``
(1 = model token, 0 = environment token), plus any extra fields, which it
forwards to the reward functions. Our :class:`~budgetmix.training.rollouts.rollout.Rollout`
maps one to one: ``completion_ids = response_ids``, ``env_mask = response_mask``.

Each dataset prompt is a task id (``{"prompt": "echo-17"}``); the adapter
looks the task up, draws the budget from the sampler (one per group of
identical consecutive prompts with ``group_budgets="shared"``), rolls out with
the trainer's current model, and returns the budget-aware reward (0 when
the budget ran out) in the ``budget_reward`` field that :func:`budget_reward`
hands back to TRL.

Sampling: with ``GRPOConfig(use_vllm=True)`` (server or colocate mode) every turn
is sampled by vLLM through TRL's own client or engine, with the weights TRL synced
before the call (:mod:`budgetmix.training.engines.trl_vllm`); without it, by the trainer's
model in-process (:class:`~budgetmix.training.rollouts.generation.ModelGenerator`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from budgetmix.environment import Task
from budgetmix.exceptions import ConfigError
from budgetmix.policies.samplers import BudgetSampler
from budgetmix.training.engines.trl_vllm import trl_vllm_generator
from budgetmix.training.rollouts.chat import ChatCodec
from budgetmix.training.rollouts.generation import ModelGenerator, TokenGenerator
from budgetmix.training.rollouts.rollout import EpisodeSpec, Rollout, RolloutSettings, run_rollouts

__all__ = ["budget_reward", "make_rollout_func", "rollout_fields"]


def rollout_fields(rollouts: Sequence[Rollout]) -> dict[str, list[Any]]:
    """The record as TRL's ``rollout_func`` returns it (also verl's agent-loop fields)."""
    return {
        "prompt_ids": [list(r.prompt_ids) for r in rollouts],
        "completion_ids": [list(r.response_ids) for r in rollouts],
        "logprobs": [list(r.logprobs) for r in rollouts],
        "env_mask": [list(r.response_mask) for r in rollouts],
        "budget_reward": [r.reward for r in rollouts],
        "budget_turns": [r.budget.turns for r in rollouts],
        "num_turns": [r.num_turns for r in rollouts],
        "termination": [r.termination for r in rollouts],
    }


def budget_reward(
    completions: Sequence[Any], budget_reward: Sequence[float], **_: Any
) -> list[float]:
    """A TRL reward function returning the rollout's budget-aware reward unchanged."""
    return [float(r) for r in budget_reward]


def make_rollout_func(
    tasks: Mapping[str, Task] | Sequence[Task],
    sampler: BudgetSampler,
    tokenizer: Any,
    *,
    settings: RolloutSettings | None = None,
    group_budgets: str = "shared",
    seed: int = 0,
    temperature: float = 1.0,
    generator_factory: Callable[[Any], TokenGenerator] | None = None,
    use_vllm: bool | None = None,
) -> Callable[[list[Any], Any], dict[str, list[Any]]]:
    """Build a ``rollout_func`` for ``trl.GRPOTrainer(rollout_func=...)``.

    ``generator_factory(model)`` replaces sampling from the trainer's model
    (e.g. a :class:`~budgetmix.training.rollouts.generation.ScriptedGenerator` in tests).
    ``use_vllm`` (default: the trainer's ``use_vllm``) samples every turn through
    ``trainer.vllm_generation`` (:func:`~budgetmix.training.engines.trl_vllm.trl_vllm_generator`,
    TRL's sampling settings; ``temperature`` here is then unused).

    Raises:
        ConfigError: ``group_budgets`` is not shared/mixed; at call time, a prompt
            that names no known task.
    """
    if group_budgets not in ("shared", "mixed"):
        raise ConfigError(f"group_budgets must be shared or mixed, got {group_budgets!r}")
    by_id = dict(tasks) if isinstance(tasks, Mapping) else {t.task_id: t for t in tasks}
    codec = ChatCodec(tokenizer)
    rollout_settings = settings or RolloutSettings()
    rng = random.Random(seed)
    sample_gen = torch.Generator().manual_seed(seed)

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        specs = _group_specs([_task_of(by_id, p) for p in prompts], sampler, rng, group_budgets)
        model = trainer.accelerator.unwrap_model(trainer.model)
        if generator_factory is not None:
            gen: TokenGenerator = generator_factory(model)
        elif getattr(trainer, "use_vllm", False) if use_vllm is None else use_vllm:
            gen = trl_vllm_generator(trainer, stop_token_ids=codec.stop_token_ids)
        else:
            gen = ModelGenerator(
                model,
                eos_token_id=codec.eos_token_id,
                stop_token_ids=codec.stop_token_ids,
                pad_token_id=int(tokenizer.pad_token_id),
                temperature=temperature,
                generator=sample_gen,
            )
        return rollout_fields(run_rollouts(specs, gen, codec, rollout_settings))

    return rollout_func


def _task_of(by_id: Mapping[str, Task], prompt: Any) -> Task:
    key = prompt if isinstance(prompt, str) else prompt[-1]["content"]
    if key not in by_id:
        raise ConfigError(f"rollout_func: prompt {key!r} names no known task")
    return by_id[key]


def _group_specs(
    tasks: Sequence[Task], sampler: BudgetSampler, rng: random.Random, group_budgets: str
) -> list[EpisodeSpec]:
    """One spec per prompt's task; a new group where the task changes (TRL repeats each
    prompt ``num_generations`` times in a row), its budget shared or drawn per rollout."""
    specs: list[EpisodeSpec] = []
    group, previous, draw = -1, None, None
    for task in tasks:
        if task.task_id != previous:
            group, previous, draw = group + 1, task.task_id, sampler.sample(rng)
        budget = draw if group_budgets == "shared" else sampler.sample(rng)
        assert budget is not None
        specs.append(EpisodeSpec(task=task, budget=budget, group=group))
    return specs
