"""One plot style: titles name the run, x ticks are the evaluated budgets, one colour per arm.

The tests open the figure objects (captured where ``save_figure`` closes them), not pixels.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _eval_doubles import RandomWalker, line_tasks
from budgetmix.evaluation import EvalConfig, Evaluator, compare_runs, read_results, summarize

pytest.importorskip("matplotlib")
from budgetmix.evaluation import plots
from matplotlib.colors import to_hex

SUCCESS_COST, FRONTIER = "Success vs cost", "Breadth vs depth at fixed cost"
CFG = EvalConfig(budgets=(2, 4, 8), samples=2, training_ceiling=4, fault_step=2)


@pytest.fixture()
def figures(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Every figure a plot closes, kept open for inspection."""
    plt = plots.pyplot()
    kept: list[Any] = []
    real_close = plt.close
    monkeypatch.setattr(plt, "close", kept.append)
    yield kept
    for fig in kept:
        real_close(fig)


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("plots") / "r.jsonl"
    Evaluator(lambda: RandomWalker(), line_tasks(3), CFG).run(path)
    return path


def _summary(results: Path, agent: dict[str, Any]) -> dict[str, Any]:
    s = summarize(read_results(results).records, n_boot=50)
    s["header"] = {"identity": {"env": "line", "agent": agent}}
    return s


def _ticks(ax: Any) -> list[str]:
    return [t.get_text() for t in ax.get_xticklabels()]


def test_grid_plots_name_the_agent_and_tick_at_the_budgets(
    results: Path, tmp_path: Path, figures: list[Any]
) -> None:
    s = _summary(results, {"kind": "model", "model": "tiny-lm", "blind": False})
    plots.plot_heatmap(s, tmp_path / "h.png")
    plots.plot_success_curves(s, tmp_path / "s.png")
    plots.plot_cost_curves(s, tmp_path / "c.png")
    heat, curves, cost = figures
    assert heat.axes[0].get_title() == "Pass@(k, T): agent model (tiny-lm) on line"
    assert curves.axes[0].get_title() == "Success vs budget: agent model (tiny-lm) on line"
    assert cost.get_suptitle() == "Cost: agent model (tiny-lm) on line"
    budgets = ["2", "4", "8*"]  # * = beyond the training ceiling
    assert _ticks(heat.axes[0]) == budgets
    assert _ticks(curves.axes[0]) == budgets
    assert list(curves.axes[0].get_xticks()) == [2, 4, 8]
    titles = [ax.get_title() for ax in cost.axes]
    assert titles == [SUCCESS_COST, "Wall time (machine-dependent)", FRONTIER]
    assert _ticks(cost.axes[1]) == budgets


def test_scripted_agents_get_no_wall_time_panel(
    results: Path, tmp_path: Path, figures: list[Any]
) -> None:
    s = _summary(results, {"kind": "oracle", "blind": True})
    plots.plot_cost_curves(s, tmp_path / "c.png")
    (cost,) = figures
    assert [ax.get_title() for ax in cost.axes] == [SUCCESS_COST, FRONTIER]
    assert cost.get_suptitle() == "Cost: agent oracle, budget-blind on line"


def test_comparison_colours_follow_the_arm_and_ticks_are_budgets(
    results: Path, tmp_path: Path, figures: list[Any]
) -> None:
    compare_runs(results, results, tmp_path / "ab", ("fixed", "budgetmix"), n_boot=50)
    compare_runs(results, results, tmp_path / "ba", ("budgetmix", "fixed"), n_boot=50)
    first, second = figures
    for fig in figures:
        top, bot = fig.axes
        assert top.get_title().endswith("pass@1 by budget") and bot.get_title()
        assert _ticks(bot) == ["2", "4", "8"]
    colour = {
        fig: {ln.get_label(): to_hex(ln.get_color()) for ln in fig.axes[0].lines} for fig in figures
    }
    assert colour[first]["fixed"] == colour[second]["fixed"] == to_hex(plots.arm_colour("fixed"))
    assert colour[first]["budgetmix"] == colour[second]["budgetmix"] != colour[first]["fixed"]


def test_arm_colours_are_fixed_and_stable() -> None:
    assert plots.arm_colour("fixed") == "tab:blue"
    assert plots.arm_colour("budgetmix") == "tab:orange"
    assert plots.arm_colour("my-arm") == plots.arm_colour("my-arm")  # no per-process hash


def test_the_region_beyond_the_training_ceiling_is_shaded_to_the_edge(
    results: Path, tmp_path: Path, figures: list[Any]
) -> None:
    plots.plot_success_curves(_summary(results, {"kind": "random"}), tmp_path / "s.png")
    ax = figures[0].axes[0]
    (span,) = [p for p in ax.patches if p.get_label() == "beyond training ceiling"]
    x0, x1 = span.get_x(), span.get_x() + span.get_width()
    assert x0 == 6.0  # halfway between budget 4 (inside the ceiling) and 8 (beyond it)
    assert x1 == ax.get_xlim()[1] and x1 > 8  # to the axis's right edge (a 1-wide band before)


def test_two_labels_of_one_colour_are_told_apart(
    results: Path, tmp_path: Path, figures: list[Any]
) -> None:
    a, b = "run-2", "run-3"
    assert plots.arm_colour(a) == plots.arm_colour(b)  # the palette's stable pick collides
    compare_runs(results, results, tmp_path / "ab", (a, b), n_boot=50)
    colours = {ln.get_label(): to_hex(ln.get_color()) for ln in figures[0].axes[0].lines}
    assert colours[a] != colours[b]
