"""The experiment's plots: titles, ticks at the evaluated budgets, the same colour per arm."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("matplotlib")
from budgetmix.evaluation.plots import arm_colour, pyplot
from budgetmix.training.experiment.report import _plots
from budgetmix.training.experiment.run import ExperimentReport
from matplotlib.colors import to_hex

BUDGETS = {"25%": 2, "50%": 4, "100%": 8}
ARMS = ("fixed", "budgetmix")


def _report(out: Path) -> ExperimentReport:
    grid = [
        {"arm": a, "fraction": f, "budget": t, "k": 1, "value": 0.5, "lo": 0.4, "hi": 0.6}
        for a in ("base", *ARMS)
        for f, t in BUDGETS.items()
    ]
    comparison = [
        {"arm": "budgetmix", "fraction": f, "budget": t, "diff": 0.1, "lo": 0.0, "hi": 0.2}
        for f, t in BUDGETS.items()
    ]
    curve = {"success_curve": [0.1, 0.2, 0.3, 0.4]}
    return ExperimentReport(
        config={},
        ceiling=8,
        budgets=BUDGETS,
        oracle={
            "aware": dict.fromkeys(BUDGETS, 0.7),
            "blind_demonstrator": dict.fromkeys(BUDGETS, 0.6),
        },
        grid=grid,
        comparison=comparison,
        diagnostics={},
        training={a: [curve, curve] for a in ARMS},
        timings={},
        best_checkpoint=out,
        out_dir=out,
    )


@pytest.fixture()
def figures(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    plt = pyplot()
    kept: list[Any] = []
    real_close = plt.close
    monkeypatch.setattr(plt, "close", kept.append)
    yield kept
    for fig in kept:
        real_close(fig)


def test_every_plot_has_a_title_budget_ticks_and_one_colour_per_arm(
    tmp_path: Path, figures: list[Any]
) -> None:
    files = _plots(_report(tmp_path), tmp_path)
    assert set(files) == {"success_vs_budget", "budgetmix_minus_fixed", "training_curves"}
    success, difference, training = (fig.axes[0] for fig in figures)
    for ax in (success, difference, training):
        assert ax.get_title()
    assert [t.get_text() for t in success.get_xticklabels()] == ["2", "4", "8"]
    labels = [t.get_text() for t in difference.get_xticklabels()]
    assert labels == ["25%\nT=2", "50%\nT=4", "100%\nT=8"]
    for arm in ARMS:
        want = to_hex(arm_colour(arm))
        bars = [c for c in success.containers if c.get_label() == arm]
        assert bars and to_hex(bars[0].lines[0].get_color()) == want
        curves = [ln for ln in training.lines if ln.get_label().startswith(f"{arm} s")]
        assert len(curves) == 2 and {to_hex(ln.get_color()) for ln in curves} == {want}
    (bm,) = [c for c in difference.containers if c.get_label() == "budgetmix - fixed"]
    assert to_hex(bm.patches[0].get_facecolor()) == to_hex(arm_colour("budgetmix"))


def _with_masked_pair_and_sensitivity(out: Path) -> ExperimentReport:
    report = _report(out)
    masked = [
        {**c, "versus": "budgetmix-masked", "diff": 0.05} for c in report.comparison
    ]  # the second pair of the same arm
    turns = list(range(1, 11))
    seed = {"p_flip": [0.5] * len(turns)}
    sens = {
        arm: {"turns_left": turns, "p_flip": [0.1 * (t % 2) for t in turns], "per_seed": [seed],
              "mean": 0.1, "lo": 0.0, "hi": 0.2, "optimal_budgets": [3, 4], "flip_action": "up"}
        for arm in ("base", *ARMS)
    }  # fmt: skip
    return ExperimentReport(
        **{
            **report.__dict__,
            "comparison": [*report.comparison, *masked],
            "diagnostics": {"sensitivity": sens},
        }
    )


def test_two_pairs_of_one_arm_get_two_colours(tmp_path: Path, figures: list[Any]) -> None:
    _plots(_with_masked_pair_and_sensitivity(tmp_path), tmp_path)
    (difference,) = [f.axes[0] for f in figures if f.axes[0].get_title().startswith("Paired")]
    bars = {
        c.get_label(): to_hex(c.patches[0].get_facecolor())
        for c in difference.containers
        if hasattr(c, "patches")
    }
    fixed, masked = bars["budgetmix - fixed"], bars["budgetmix - budgetmix-masked"]
    assert fixed == to_hex(arm_colour("budgetmix")) and masked != fixed  # both orange before


def test_budget_sensitivity_ticks_whole_turns_and_its_legend_covers_no_data(
    tmp_path: Path, figures: list[Any]
) -> None:
    _plots(_with_masked_pair_and_sensitivity(tmp_path), tmp_path)
    (fig,) = [f for f in figures if f.axes[0].get_title().startswith("Budget sensitivity")]
    ax = fig.axes[0]
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks)  # no 2.5 / 7.5 turns
    fig.canvas.draw()
    legend = ax.get_legend().get_window_extent()
    assert not legend.overlaps(ax.get_window_extent())  # beside the axes, not over the lines
