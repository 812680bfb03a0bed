"""How one RL step groups its rollouts: budgets per group, baselines, zero-variance groups, lr.

* :func:`group_specs` -- ``groups_per_step`` groups of ``group_size`` episodes of
  one task each, with one budget per group (``"shared"``), one per rollout
  (``"mixed"``), or every budget of the sampler's support equally often
  (``"stratified"``: with 4 budgets and groups of 8, two rollouts per budget).
* :func:`baseline_keys` -- the key a rollout's baseline is computed over: its group,
  or (``"stratified"``) its group *and* budget, so a rollout is compared only with
  rollouts that had the same turns (a budget-stratified baseline: drawing a long
  budget is not rewarded as if it were a good action).
* :func:`informative` -- which rollouts belong to a baseline set whose rewards
  differ (a zero-variance set has advantage 0 for everyone; with
  ``zero_variance="skip"`` it is left out of the update and counted).
* :func:`scheduled_lr` -- warmup, then constant or linear decay to
  ``LR_FLOOR`` of the base rate over the run's progress (the larger of the step
  and the sampled-token fraction, so a token-budgeted run decays by tokens).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from budgetmix.environment import Task
from budgetmix.exceptions import ConfigError
from budgetmix.policies.samplers import BudgetDraw, BudgetSampler
from budgetmix.training.rollouts.rollout import EpisodeSpec, Rollout

if TYPE_CHECKING:
    from budgetmix.training.config import TrainConfig

__all__ = [
    "LR_FLOOR",
    "baseline_keys",
    "group_specs",
    "informative",
    "progress_of",
    "rl_tokens_logged",
    "scheduled_lr",
    "select_for_update",
]

#: Linear decay ends at this fraction of the base learning rate.
LR_FLOOR = 0.1


def _stratified(sampler: BudgetSampler, size: int, rng: random.Random) -> list[BudgetDraw]:
    """``size`` draws covering the sampler's support equally (the rest drawn at random)."""
    support = list(sampler.support())
    if size < len(support):
        raise ConfigError(
            f"group_size: {size} is smaller than the {len(support)} budgets a stratified "
            "group must hold"
        )
    by_turns: dict[int, BudgetDraw] = {}
    tries = 0
    while len(by_turns) < len(support):  # one draw object per budget, as the sampler labels it
        d = sampler.sample(rng)
        by_turns.setdefault(d.turns, d)
        tries += 1
        if tries > 10_000:
            raise ConfigError("sampler: a stratified group could not draw every budget")
    draws = [by_turns[t] for t in support] * (size // len(support))
    draws += [sampler.sample(rng) for _ in range(size - len(draws))]
    return draws


def group_specs(
    config: TrainConfig,
    task_for: Callable[[int], Task],
    sampler: BudgetSampler,
    rng: random.Random,
) -> list[EpisodeSpec]:
    """The episodes of one RL step: ``config.groups_per_step`` groups of ``group_size``
    episodes of one task each (``task_for(seed)``), budgets per ``config.group_budgets``.

    Raises:
        ConfigError: a stratified group smaller than the sampler's support.
    """
    mode, size = config.group_budgets, config.group_size
    specs: list[EpisodeSpec] = []
    for g in range(config.groups_per_step):
        task = task_for(rng.randrange(config.num_train_seeds))
        if mode == "stratified":
            draws = _stratified(sampler, size, rng)
        else:
            shared = sampler.sample(rng)
            draws = [shared if mode == "shared" else sampler.sample(rng) for _ in range(size)]
        specs.extend(EpisodeSpec(task=task, budget=d, group=g) for d in draws)
    return specs


def baseline_keys(rollouts: Sequence[Rollout], mode: str) -> list[int]:
    """One baseline-set id per rollout: the group, or (stratified) the group and the budget."""
    keys: dict[Hashable, int] = {}
    out = []
    for r in rollouts:
        key: Hashable = (r.group, r.budget.turns) if mode == "stratified" else r.group
        out.append(keys.setdefault(key, len(keys)))
    return out


def informative(rewards: Sequence[float], keys: Sequence[int]) -> tuple[list[bool], int, int]:
    """``(keep, zero_variance_sets, sets)``: keep[i] when rollout i's set has differing rewards."""
    members: dict[int, list[float]] = {}
    for r, k in zip(rewards, keys, strict=True):
        members.setdefault(k, []).append(float(r))
    varied = {k for k, rs in members.items() if len(rs) > 1 and max(rs) > min(rs)}
    return [k in varied for k in keys], len(members) - len(varied), len(members)


def scheduled_lr(config: TrainConfig, base: float, phase_step: int, rl_tokens: int | None) -> float:
    """The learning rate at ``phase_step`` (0-based): warmup, then ``config.lr_decay``.

    ``rl_tokens`` (tokens sampled so far) is given for RL steps; SFT (``None``) does
    not decay. Linear decay follows :func:`progress_of` down to :data:`LR_FLOOR`.
    """
    warm = config.warmup_steps
    lr = base * min(1.0, (phase_step + 1) / warm) if warm else base
    if rl_tokens is not None and config.lr_decay == "linear":
        done = progress_of(phase_step, config.steps, rl_tokens, config.token_budget)
        lr *= max(LR_FLOOR, 1.0 - (1.0 - LR_FLOOR) * done)
    return lr


def progress_of(step: int, steps: int, tokens: int, token_budget: int | None) -> float:
    """Fraction of an RL run done: by steps, or by sampled tokens when that is further along."""
    done = step / steps if steps else 1.0
    if token_budget:
        done = max(done, tokens / token_budget)
    return min(1.0, done)


def select_for_update(
    rollouts: Sequence[Rollout], config: TrainConfig, world: int, summary: dict[str, Any]
) -> tuple[list[Rollout], list[int]]:
    """``(rollouts, baseline keys)`` to update on; counts go into the step's ``summary``.

    With ``zero_variance="skip"`` (one process only: under DDP every rank must
    step, so sets are counted but kept) rollouts of zero-variance sets are left
    out. Counts: ``zero_variance_sets`` and ``baseline_sets`` of the step.
    """
    keys = baseline_keys(rollouts, config.group_budgets)
    keep, zero, sets = informative([r.reward for r in rollouts], keys)
    summary.update(zero_variance_sets=zero, baseline_sets=sets)
    if config.zero_variance != "skip" or world != 1:
        return list(rollouts), keys
    pairs = [(r, k) for r, k, kept in zip(rollouts, keys, keep, strict=True) if kept]
    return [r for r, _ in pairs], [k for _, k in pairs]


def rl_tokens_logged(records: Sequence[Mapping[str, Any]]) -> int:
    """Tokens sampled by the RL steps of a metrics log (to resume the token budget)."""
    return sum(int(m.get("sampled_tokens", 0)) for m in records if m.get("phase") == "rl")
