"""The exact sign-flip test and the hierarchical bootstrap against hand-derived values."""

from __future__ import annotations

import math

import pytest
from budgetmix.exceptions import ConfigError
from budgetmix.training.diagnostics.stats import hierarchical_bootstrap, sign_flip_test


def test_sign_flip_counts_every_assignment() -> None:
    # magnitudes 1,2,3,1 (sum 7), observed |1+2+3-1| = 5: a flipped subset of sum s gives
    # |7 - 2s| >= 5 iff s <= 1 ({}, {1}, {1'}) or s >= 6 ({1,2,3}, {1',2,3}, all): 6 of 16
    res = sign_flip_test([1.0, 2.0, 3.0, -1.0])
    assert res.p == pytest.approx(6 / 16)
    assert res.n == 4 and res.mean == pytest.approx(1.25)
    assert res.p_min == pytest.approx(2 / 16)


def test_sign_flip_floor_is_two_over_two_to_the_n() -> None:
    assert sign_flip_test([0.1, 0.2, 0.3, 0.4]).p == pytest.approx(0.125)  # issue 29: 4 seeds
    eight = sign_flip_test([0.01 * (i + 1) for i in range(8)])
    assert eight.p == pytest.approx(2 / 256) and eight.p == eight.p_min
    assert sign_flip_test([1.0, -1.0]).p == 1.0  # mean 0: every assignment is as far
    assert sign_flip_test([0.0, 0.0, 0.0]).p == 1.0


def test_sign_flip_refuses_what_it_cannot_enumerate() -> None:
    with pytest.raises(ConfigError, match="no values"):
        sign_flip_test([])
    with pytest.raises(ConfigError, match="at most 20"):
        sign_flip_test([1.0] * 21)


def test_bootstrap_grand_mean_weights_every_level_equally() -> None:
    res = hierarchical_bootstrap([[[1.0, 1.0]], [[0.0, 0.0, 0.0, 0.0]]], reps=200)
    assert res.mean == pytest.approx(0.5)  # not the pooled 2/6
    assert res.levels == (2, 2, 6)
    constant = hierarchical_bootstrap([[[0.25] * 5] * 3] * 2, reps=200)
    assert constant.lo == constant.hi == pytest.approx(0.25)


def test_bootstrap_episode_level_matches_the_binomial() -> None:
    # one base, one seed, 400 episodes at 50%: se 0.025, 95% about +-0.049
    res = hierarchical_bootstrap([[[1.0, 0.0] * 200]], reps=2000, seed=1)
    assert res.lo == pytest.approx(0.5 - 1.96 * 0.025, abs=0.012)
    assert res.hi == pytest.approx(0.5 + 1.96 * 0.025, abs=0.012)


def test_bootstrap_carries_seed_variation_a_flat_resample_misses() -> None:
    # 10 seeds, half always fail and half always succeed: the episodes carry no noise,
    # the seeds do (se sqrt(0.25 / 10) = 0.158); pooled episodes would give about +-0.03
    tree = [[[0.0] * 50 for _ in range(5)] + [[1.0] * 50 for _ in range(5)]]
    res = hierarchical_bootstrap(tree, reps=2000, seed=2)
    se = math.sqrt(0.25 / 10)
    assert res.hi - res.lo == pytest.approx(2 * 1.96 * se, rel=0.2)
    bases = hierarchical_bootstrap([[[0.0]], [[1.0]]], reps=2000, seed=3)
    assert (bases.lo, bases.hi) == (0.0, 1.0)  # two bases: one quarter of draws are both 0


def test_bootstrap_is_seeded_and_checks_its_input() -> None:
    tree = [[[0.0, 1.0, 1.0], [1.0, 0.0]], [[1.0], [0.0, 0.0, 1.0]]]
    assert hierarchical_bootstrap(tree, seed=5) == hierarchical_bootstrap(tree, seed=5)
    for bad in ([], [[]], [[[]]], [[[1.0]], []]):
        with pytest.raises(ConfigError, match="every base"):
            hierarchical_bootstrap(bad)
    with pytest.raises(ConfigError, match="reps"):
        hierarchical_bootstrap(tree, reps=10)
    with pytest.raises(ConfigError, match="level"):
        hierarchical_bootstrap(tree, level=1.0)
