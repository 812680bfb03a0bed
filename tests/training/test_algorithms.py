"""GRPO/RLOO advantages and the clipped, per-rollout-normalised loss vs hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch
from budgetmix.exceptions import ConfigError
from budgetmix.training.algorithms.objectives import group_advantages, policy_loss, sft_loss


def test_grpo_advantages_by_hand() -> None:
    # group 0: rewards 1, 0, 0, 1 -> mean .5, population std .5 -> +-1
    # group 1: rewards 1, 1 -> std 0 -> 0
    adv = group_advantages([1, 0, 0, 1, 1, 1], [0, 0, 0, 0, 1, 1], eps=0.0 + 1e-12)
    assert adv == pytest.approx([1, -1, -1, 1, 0, 0])
    unscaled = group_advantages([1, 0, 0, 0], [7, 7, 7, 7], scale_rewards=False)
    assert unscaled == pytest.approx([0.75, -0.25, -0.25, -0.25])


def test_rloo_advantages_by_hand() -> None:
    # r - mean(others): 1 - 0 = 1 ; 0 - 1/2 = -.5 ; 0 - 1/2 = -.5
    assert group_advantages([1, 0, 0], [0, 0, 0], estimator="rloo") == pytest.approx(
        [1, -0.5, -0.5]
    )
    assert group_advantages([1.0], [3], estimator="rloo") == [0.0]  # a group of one


def test_advantage_errors() -> None:
    with pytest.raises(ConfigError, match="estimator"):
        group_advantages([1.0], [0], estimator="ppo")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="same length"):
        group_advantages([1.0, 2.0], [0])


def test_policy_loss_by_hand() -> None:
    # rollout 0: two sampled tokens, A = +1; ratios e^0.1 = 1.105 (inside) and e^0.5 (clip 1.2)
    # rollout 1: one sampled token (plus one masked), A = -2; ratio e^-0.5 = 0.6065 -> clip 0.8
    logp = torch.tensor([[0.1, 0.5], [-0.5, 3.0]])
    old = torch.zeros(2, 2)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    adv = torch.tensor([1.0, -2.0])
    out = policy_loss(logp, old, adv, mask, clip_eps=0.2)
    r0 = -(min(math.exp(0.1), 1.2) + min(math.exp(0.5), 1.2)) / 2  # -min(r A, clip(r) A)
    r1 = -min(math.exp(-0.5) * -2, 0.8 * -2)  # = 1.6: pessimistic side is the clipped one
    assert float(out.loss) == pytest.approx((r0 + r1) / 2, rel=1e-6)
    assert out.clip_fraction == pytest.approx(2 / 3)  # tokens 2 and 3 are clipped


def test_policy_loss_is_normalised_per_rollout() -> None:
    # the same per-token loss in a 1-token and a 3-token rollout weighs the same
    logp = torch.zeros(2, 3)
    mask = torch.tensor([[1.0, 0, 0], [1.0, 1.0, 1.0]])
    adv = torch.tensor([1.0, 3.0])
    out = policy_loss(logp, torch.zeros(2, 3), adv, mask)
    assert float(out.loss) == pytest.approx(-(1.0 + 3.0) / 2)


def test_kl_term_k3() -> None:
    logp = torch.tensor([[0.0]])
    ref = torch.tensor([[math.log(0.5)]])
    out = policy_loss(
        logp, logp, torch.tensor([0.0]), torch.ones(1, 1), ref_logprobs=ref, kl_coef=0.1
    )
    k3 = 0.5 - math.log(0.5) - 1
    assert out.kl == pytest.approx(k3)
    assert float(out.loss) == pytest.approx(0.1 * k3)


def test_sft_loss() -> None:
    logp = torch.tensor([[-1.0, -3.0], [-2.0, -9.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    assert float(sft_loss(logp, mask)) == pytest.approx((2.0 + 2.0) / 2)
