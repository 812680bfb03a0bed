"""TRL's GRPOTrainer trains one step on budget-aware multi-turn rollouts via rollout_func."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from budgetmix.policies.samplers import BudgetMix
from budgetmix.training.envs import env_tasks
from budgetmix.training.generation import ScriptedGenerator
from budgetmix.training.rollout import RolloutSettings
from budgetmix.training.toy import echo_agent
from budgetmix.training.trl_adapter import budget_reward, make_rollout_func

trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")


def _one_step(out: Path) -> Any:
    """One GRPO step on the CPU: 2 prompts x 4 generations, a large learning rate."""
    return trl.GRPOConfig(
        output_dir=str(out),
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=512,
        max_steps=1,
        learning_rate=1e-2,
        report_to="none",
        use_cpu=True,
        logging_steps=1,
        save_strategy="no",
        bf16=False,
        seed=0,
        disable_tqdm=True,
    )


def test_grpo_trainer_step_with_env_mask(
    tmp_path: Path, tokenizer: Any, tiny_model: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    tasks = env_tasks("echo", range(4), {})
    settings = RolloutSettings(max_new_tokens=4, notice_format="v1-compact", token_check="strict")
    inner = make_rollout_func(
        tasks,
        BudgetMix(ceiling=4),
        tokenizer,
        settings=settings,
        generator_factory=lambda model: ScriptedGenerator(echo_agent(0.5, seed=1), tokenizer),
    )
    seen: list[tuple[list[Any], dict[str, list[Any]]]] = []

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        out = inner(prompts, trainer)
        seen.append((prompts, out))
        return out

    before = {k: v.clone() for k, v in tiny_model.state_dict().items()}
    trainer = trl.GRPOTrainer(
        model=tiny_model,
        reward_funcs=budget_reward,
        args=_one_step(tmp_path),
        train_dataset=datasets.Dataset.from_dict({"prompt": [t.task_id for t in tasks]}),
        processing_class=tokenizer,
        rollout_func=rollout_func,
    )
    trainer.train()
    assert trainer.state.global_step == 1
    prompts, out = seen[0]
    assert len(prompts) == 8 and prompts[0] == prompts[3]  # TRL repeats each prompt per group
    for ids, mask, lps in zip(out["completion_ids"], out["env_mask"], out["logprobs"], strict=True):
        assert len(ids) == len(mask) == len(lps)
    assert any(0 in m for m in out["env_mask"])  # multi-turn: environment tokens are masked out
    # groups of identical prompts share one budget ("shared")
    assert out["budget_turns"][0:4] == [out["budget_turns"][0]] * 4
    logged = trainer.state.log_history[0]
    model_tokens = sum(sum(m) for m in out["env_mask"]) / len(out["env_mask"])
    assert logged["completions/mean_length"] == pytest.approx(model_tokens)
    assert logged["reward"] == pytest.approx(sum(out["budget_reward"]) / 8)
    changed = any(not torch.equal(before[k], v) for k, v in tiny_model.state_dict().items())
    assert changed == (len(set(out["budget_reward"])) > 1)
