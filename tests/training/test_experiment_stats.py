"""Seed-level statistics against textbook values: t quantiles, one-sample t, Holm."""

from __future__ import annotations

import pytest
from budgetmix.exceptions import ConfigError
from budgetmix.training.diagnostics.stats import holm, mean_test, t_cdf, t_quantile


def test_t_distribution_matches_tables() -> None:
    assert t_quantile(0.975, 1) == pytest.approx(12.706, abs=1e-3)
    assert t_quantile(0.975, 3) == pytest.approx(3.182, abs=1e-3)
    assert t_quantile(0.975, 7) == pytest.approx(2.365, abs=1e-3)
    assert t_quantile(0.975, 10_000) == pytest.approx(1.960, abs=1e-3)
    assert t_cdf(0.0, 4) == pytest.approx(0.5)
    assert t_cdf(2.015, 5) == pytest.approx(0.95, abs=1e-3)


def test_mean_test_by_hand() -> None:
    res = mean_test([0.1, 0.2, 0.15, 0.05])
    # mean 0.125, sd 0.06455, se 0.032275, t = 3.873 on 3 df
    assert res.mean == pytest.approx(0.125)
    assert res.hi - res.mean == pytest.approx(3.1824 * 0.032275, rel=1e-3)
    assert res.p == pytest.approx(0.0305, abs=1e-3)
    assert mean_test([0.2, 0.2]).p == 0.0 and mean_test([0.0, 0.0]).p == 1.0
    one = mean_test([0.3])
    assert one.p == 1.0 and one.lo == float("-inf")
    with pytest.raises(ConfigError):
        mean_test([])


def test_holm_step_down() -> None:
    assert holm([0.01, 0.04, 0.03, 0.5]) == pytest.approx([0.04, 0.09, 0.09, 0.5])
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])


def test_cell_reading_names_the_pair_and_follows_holm() -> None:
    from budgetmix.training.experiment.report import _reading

    cell = {
        "arm": "budgetmix",
        "versus": "budgetmix-masked",
        "diff": -0.15,
        "lo": -0.27,
        "hi": -0.04,
    }
    assert _reading({**cell, "p_holm": 0.071}) == "within noise (Holm)"
    assert _reading({**cell, "p_holm": 0.02}) == "budgetmix-masked ahead"
    assert _reading({**cell, "diff": 0.1, "p_holm": 0.01}) == "budgetmix ahead"
    assert _reading({**cell, "p_holm": float("nan")}) == "within noise (Holm)"


def test_one_base_model_shows_its_episode_interval_not_infinite_bounds() -> None:
    from budgetmix.training.experiment.report import _s_text

    one = {
        "mean": 0.64,
        "lo": float("-inf"),
        "hi": float("inf"),
        "per_seed": [{"low": 0.59, "high": 0.69}],
    }
    assert _s_text(one) == "+0.64 [+0.59, +0.69] (one model, over episodes)"
    four = {"mean": 0.74, "lo": 0.70, "hi": 0.77, "per_seed": [{"low": 0.6, "high": 0.8}] * 4}
    assert _s_text(four) == "+0.74 [+0.70, +0.77]"


def test_the_deployment_pick_never_takes_the_masked_control() -> None:
    from pathlib import Path

    from budgetmix.training.diagnostics.episodes import EpisodeTrace
    from budgetmix.training.experiment.analysis import best_checkpoint

    def traces(successes: int) -> dict[int, list[EpisodeTrace]]:
        runs = [EpisodeTrace("t", i, 7, (), (), (), i < successes, "done") for i in range(4)]
        return {7: runs}

    arms = {
        "base": [Path("base")],
        "fixed": [Path("f0")],
        "budgetmix": [Path("b0"), Path("b1")],
        "budgetmix-masked": [Path("m0")],
    }
    validation = {
        "fixed": [traces(4)],
        "budgetmix": [traces(1), traces(2)],
        "budgetmix-masked": [traces(4)],  # best on validation, but not deployable
    }
    path, pick = best_checkpoint(arms, validation)
    assert (path, pick["arm"], pick["seed"], pick["validation_success"]) == (
        Path("b1"), "budgetmix", 1, 0.5,
    )  # fmt: skip
