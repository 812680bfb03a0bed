"""RL step grouping: stratified budgets and baselines, zero-variance sets, lr, token budget."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from budgetmix.environment import Task
from budgetmix.exceptions import ConfigError
from budgetmix.policies.samplers import BudgetDraw
from budgetmix.training.algorithms.rl_groups import (
    LR_FLOOR,
    baseline_keys,
    group_specs,
    informative,
    scheduled_lr,
    select_for_update,
)
from budgetmix.training.config import TrainConfig, preset
from budgetmix.training.rollouts.rollout import Rollout

MIX = {"kind": "budgetmix", "ceiling": 8, "fractions": [0.25, 0.5, 0.75, 1.0]}


def _cfg(**kw: object) -> TrainConfig:
    base = {"env": "echo", "sampler": MIX, "progress": False, "sft_steps": 0}
    return TrainConfig(**{**base, **kw})  # type: ignore[arg-type]


def _task(seed: int) -> Task:
    return Task(task_id=f"t{seed}", make_env=lambda: None, seed=seed)  # type: ignore[arg-type,return-value]


def _rollout(group: int, turns: int, reward: float) -> Rollout:
    return Rollout(
        task_id="t", seed=0, group=group, budget=BudgetDraw(turns=turns, sampler="t"),
        prompt_ids=(1,), response_ids=(2,), response_mask=(1,), logprobs=(0.0,),
        reward=reward, success=reward > 0, num_turns=1, termination="success",
        steps=(), messages=(),
    )  # fmt: skip


def test_stratified_groups_hold_every_budget_equally_and_one_task() -> None:
    cfg = _cfg(group_budgets="stratified", groups_per_step=3, group_size=8)
    specs = group_specs(cfg, _task, cfg.budget_sampler(), random.Random(0))
    assert len(specs) == 24
    for g in range(3):
        mine = [s for s in specs if s.group == g]
        assert sorted(s.budget.turns for s in mine) == [2, 2, 4, 4, 6, 6, 8, 8]
        assert len({s.task.seed for s in mine}) == 1
    with pytest.raises(ConfigError, match="smaller than the 4 budgets"):
        bad = _cfg(group_budgets="stratified", group_size=3)
        group_specs(bad, _task, bad.budget_sampler(), random.Random(0))


def test_shared_and_mixed_groups_draw_as_before() -> None:
    shared = _cfg(group_budgets="shared", groups_per_step=4, group_size=4)
    specs = group_specs(shared, _task, shared.budget_sampler(), random.Random(1))
    for g in range(4):
        assert len({s.budget.turns for s in specs if s.group == g}) == 1
    mixed = _cfg(group_budgets="mixed", groups_per_step=4, group_size=8)
    specs = group_specs(mixed, _task, mixed.budget_sampler(), random.Random(1))
    assert any(len({s.budget.turns for s in specs if s.group == g}) > 1 for g in range(4))


def test_budget_stratified_baselines_compare_only_equal_budgets() -> None:
    rs = [_rollout(0, 2, 0.0), _rollout(0, 2, 0.0), _rollout(0, 8, 1.0), _rollout(0, 8, 0.0)]
    assert baseline_keys(rs, "mixed") == [0, 0, 0, 0]
    assert baseline_keys(rs, "stratified") == [0, 0, 1, 1]
    # the short pair both failed: no signal there; the long pair differs
    keep, zero, sets = informative([r.reward for r in rs], baseline_keys(rs, "stratified"))
    assert keep == [False, False, True, True] and (zero, sets) == (1, 2)
    summary: dict[str, object] = {}
    cfg = _cfg(group_budgets="stratified", group_size=4, zero_variance="skip")
    kept, keys = select_for_update(rs, cfg, 1, summary)
    assert kept == rs[2:] and keys == [1, 1]
    assert summary == {"zero_variance_sets": 1, "baseline_sets": 2}
    # under DDP every rank must step: counted, not skipped
    assert select_for_update(rs, cfg, 2, {})[0] == rs
    keep_cfg = _cfg(group_budgets="stratified", group_size=4)
    assert select_for_update(rs, keep_cfg, 1, {})[0] == rs


def test_lr_warms_up_then_decays_linearly_by_steps_or_tokens() -> None:
    cfg = _cfg(steps=10, warmup_steps=2, lr_decay="linear", token_budget=1000)
    assert scheduled_lr(cfg, 1.0, 0, None) == 0.5  # SFT: warmup only
    assert scheduled_lr(cfg, 1.0, 5, None) == 1.0
    assert scheduled_lr(cfg, 1.0, 0, 0) == 0.5
    assert scheduled_lr(cfg, 1.0, 5, 0) == pytest.approx(1 - 0.9 * 0.5)  # by steps
    assert scheduled_lr(cfg, 1.0, 1, 800) == pytest.approx(1 - 0.9 * 0.8)  # by tokens
    assert scheduled_lr(cfg, 1.0, 9, 5000) == pytest.approx(LR_FLOOR)
    flat = _cfg(steps=10)
    assert scheduled_lr(flat, 2.0, 9, 10**6) == 2.0


def test_config_refuses_unknown_modes() -> None:
    with pytest.raises(ConfigError, match="group_budgets"):
        _cfg(group_budgets="per-token")
    with pytest.raises(ConfigError, match="token_budget"):
        _cfg(token_budget=0)
    with pytest.raises(ConfigError, match="zero_variance"):
        _cfg(zero_variance="resample")


def test_a_token_budget_stops_rl_and_every_step_counts_its_sets(tmp_path: Path) -> None:
    from budgetmix.training.trainer import train

    cfg = preset(
        "echo-tiny",
        output_dir=str(tmp_path),
        env_kwargs={"letters": "a", "min_len": 1, "max_len": 3},
        sft_steps=4,
        sft_batch=8,
        steps=50,
        groups_per_step=2,
        group_size=4,
        group_budgets="stratified",
        zero_variance="skip",
        lr_decay="linear",
        token_budget=60,
        progress=False,
        hidden_size=16,
    )
    result = train(cfg)
    rl = [m for m in result.metrics if m["phase"] == "rl"]
    tokens = [m["sampled_tokens"] for m in rl]
    assert sum(tokens[:-1]) < 60 <= sum(tokens)  # stopped at the first step past the budget
    assert len(rl) < 50 and result.final_model_dir is not None
    assert all(m["baseline_sets"] == 8 for m in rl)  # 2 groups x 4 budgets
    assert all(0 <= m["zero_variance_sets"] <= 8 for m in rl)
    lrs = [m["lr"] for m in rl]
    assert lrs == sorted(lrs, reverse=True) and lrs[-1] < lrs[0]
