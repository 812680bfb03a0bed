"""PNG plots of a summary (matplotlib, Agg backend, imported lazily).

* :func:`plot_heatmap`: Pass@(K,T), k down, T across, values annotated.
* :func:`plot_success_curves`: pass@k against T, one line per k, interval bands;
  extrapolated budgets are shaded.
* :func:`plot_cost_curves`: success against mean cost per attempt, latency
  p50/p95/p99 against T, and the (k, T) cost frontier.
* :func:`plot_comparison`: pass@k of two runs against T and their difference.

One style for every budgetmix figure: a title naming what is plotted (and the
agent of a grid), x ticks at the evaluated budgets (:func:`budget_ticks`), and a
fixed colour per arm or agent name (:func:`arm_colour`), the same in every plot.
The latency panel is left out for scripted agents (their wall time measures the
machine's load, not the agent) and labelled machine-dependent otherwise.

Each raises :class:`~budgetmix.MissingExtraError` (``plots`` extra) when
matplotlib is not installed.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from budgetmix._deps import require

__all__ = [
    "ARM_COLOURS",
    "SCRIPTED_AGENTS",
    "arm_colour",
    "budget_ticks",
    "distinct_colours",
    "plot_comparison",
    "plot_cost_curves",
    "plot_heatmap",
    "plot_success_curves",
    "pyplot",
    "run_name",
    "save_figure",
]

#: Fixed colours of the usual arms and agents (any other name: :func:`arm_colour`).
ARM_COLOURS: Mapping[str, str] = {
    "fixed": "tab:blue",
    "budgetmix": "tab:orange",
    "budgetmix-mixed": "tab:green",
    "base": "tab:gray",
    "oracle": "tab:purple",
    "random": "tab:brown",
    "noisy": "tab:pink",
    "budgetmix-masked": "tab:cyan",
}
_PALETTE = ("tab:red", "tab:olive", "navy", "maroon", "darkgoldenrod", "teal")
#: Agents whose episodes take no model time: their wall time measures the machine.
SCRIPTED_AGENTS = frozenset({"oracle", "random", "noisy", "scripted"})


def arm_colour(name: str) -> str:
    """The colour of arm/agent ``name``: fixed for known names, a stable pick for others."""
    known = ARM_COLOURS.get(name)
    return known if known is not None else _PALETTE[zlib.crc32(name.encode()) % len(_PALETTE)]


def distinct_colours(names: Sequence[str]) -> list[str]:
    """:func:`arm_colour` of each name, a name whose colour an earlier one holds moved to
    the first colour nobody holds (two lines of one plot never share a colour)."""
    taken: list[str] = []
    spare = [c for c in (*ARM_COLOURS.values(), *_PALETTE) if c not in map(arm_colour, names)]
    for name in names:
        colour = arm_colour(name)
        taken.append(colour if colour not in taken else spare.pop(0))
    return taken


def budget_ticks(ax: Any, budgets: Sequence[int], labels: Sequence[str] | None = None) -> None:
    """Put the x ticks at exactly the evaluated ``budgets`` (labels default to the numbers)."""
    ax.set_xticks(list(budgets), [str(b) for b in budgets] if labels is None else list(labels))


def _agent(summary: Mapping[str, Any]) -> Mapping[str, Any]:
    ident = (summary.get("header") or {}).get("identity") or {}
    agent = ident.get("agent") if isinstance(ident, Mapping) else None
    return agent if isinstance(agent, Mapping) else {}


def run_name(summary: Mapping[str, Any]) -> str:
    """``agent <kind> on <env>`` from the run's identity (what grid titles name)."""
    ident = (summary.get("header") or {}).get("identity") or {}
    agent = _agent(summary)
    kind = str(agent.get("kind", "unknown"))
    if agent.get("model"):
        kind += f" ({agent['model']})"
    if agent.get("blind"):
        kind += ", budget-blind"
    env = ident.get("env") if isinstance(ident, Mapping) else None
    return f"agent {kind}" + (f" on {env}" if env else "")


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the headless Agg backend (every budgetmix plot uses it).

    Raises:
        MissingExtraError: matplotlib is not installed.
    """
    matplotlib = require("matplotlib", "plots")
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, plt: Any, path: str | Path) -> Path:
    """Lay out, write (110 dpi, parent folders made) and close ``fig``; returns the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _label(cell: Mapping[str, Any]) -> str:
    return f"{cell['budget']}*" if cell.get("extrapolated") else str(cell["budget"])


def plot_heatmap(summary: Mapping[str, Any], path: str | Path) -> Path:
    """Pass@(K,T) heatmap; ``*`` marks budgets beyond the training ceiling."""
    plt = pyplot()
    cells = summary["cells"]
    ks = list(range(1, int(summary["max_k"]) + 1))
    grid = [[c["pass_at_k"][k - 1]["value"] for c in cells] for k in ks]
    fig, ax = plt.subplots(figsize=(1.2 + 0.9 * len(cells), 1.2 + 0.55 * len(ks)))
    im = ax.imshow(grid, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto", origin="lower")
    ax.set_xticks(range(len(cells)), [_label(c) for c in cells])
    ax.set_yticks(range(len(ks)), [str(k) for k in ks])
    ax.set_xlabel("turn budget T")
    ax.set_ylabel("attempts k")
    ax.set_title(f"Pass@(k, T): {run_name(summary)}")
    for i, row in enumerate(grid):
        for j, v in enumerate(row):
            ax.text(
                j,
                i,
                f"{v:.2f}",
                ha="center",
                va="center",
                color="white" if v < 0.6 else "black",
                fontsize=8,
            )
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    return save_figure(fig, plt, path)


def _shade_beyond_ceiling(ax: Any, cells: Sequence[Mapping[str, Any]]) -> None:
    """Shade the whole region beyond the training ceiling: from halfway between the last
    budget inside it and the first beyond it, to the right edge of the axis."""
    extra = [c["budget"] for c in cells if c.get("extrapolated")]
    if not extra:
        return
    inside = [c["budget"] for c in cells if not c.get("extrapolated") and c["budget"] < min(extra)]
    left = (max(inside) + min(extra)) / 2 if inside else min(extra) - 0.5
    right = max(extra) + max(0.5, 0.05 * (max(extra) - min(c["budget"] for c in cells)))
    ax.axvspan(left, right, color="grey", alpha=0.15, lw=0, label="beyond training ceiling")
    ax.set_xlim(right=right)


def plot_success_curves(summary: Mapping[str, Any], path: str | Path) -> Path:
    """pass@k against T for every k, with interval bands."""
    plt = pyplot()
    cells = summary["cells"]
    xs = [c["budget"] for c in cells]
    fig, ax = plt.subplots(figsize=(6.0, 4.0))
    for k in range(1, int(summary["max_k"]) + 1):
        est = [c["pass_at_k"][k - 1] for c in cells]
        ax.plot(xs, [e["value"] for e in est], marker="o", label=f"pass@{k}", color=f"C{k - 1}")
        ax.fill_between(xs, [e["lo"] for e in est], [e["hi"] for e in est], alpha=0.12)
    _shade_beyond_ceiling(ax, cells)
    ax.set_xlabel("turn budget T")
    ax.set_ylabel("success")
    ax.set_ylim(-0.02, 1.02)
    budget_ticks(ax, xs, [_label(c) for c in cells])
    ax.set_title(f"Success vs budget: {run_name(summary)}")
    ax.legend(fontsize=7, ncol=2)
    return save_figure(fig, plt, path)


def _latency_panel(ax: Any, cells: Sequence[Mapping[str, Any]]) -> None:
    xs = [c["budget"] for c in cells]
    for q in ("p50", "p95", "p99"):
        ax.plot(xs, [c["cost"][f"latency_{q}"] for c in cells], marker="o", label=q)
    budget_ticks(ax, xs, [_label(c) for c in cells])
    ax.set_xlabel("turn budget T")
    ax.set_ylabel("episode wall time (s)")
    ax.set_title("Wall time (machine-dependent)")
    ax.legend(fontsize=7)


def _frontier_panel(ax: Any, frontier: Mapping[str, Any], metric: str) -> None:
    pts = frontier["points"]
    ax.scatter([p["cost"] for p in pts], [p["success"] for p in pts], s=12, alpha=0.5)
    par = frontier["pareto"]
    ax.plot(
        [p["cost"] for p in par],
        [p["success"] for p in par],
        color="C3",
        drawstyle="steps-post",
        label="best (k, T) at cost",
    )
    ax.set_xlabel(f"k x mean {metric} per attempt")
    ax.set_ylabel("pass@k")
    ax.set_title("Breadth vs depth at fixed cost")
    ax.legend(fontsize=7)


def plot_cost_curves(summary: Mapping[str, Any], path: str | Path) -> Path:
    """Success vs cost per attempt, wall time vs T, and the (k, T) frontier.

    The wall-time panel is left out for scripted agents (:data:`SCRIPTED_AGENTS`):
    without a model, it measures how busy the machine was.
    """
    plt = pyplot()
    cells = summary["cells"]
    metric = summary["frontier"]["metric"]
    latency = _agent(summary).get("kind") not in SCRIPTED_AGENTS
    n = 3 if latency else 2
    fig, axes = plt.subplots(1, n, figsize=(4.7 * n, 4.0))
    ax = axes[0]
    costs = [c["cost"]["cost_usd" if metric == "cost_usd" else metric] for c in cells]
    ax.plot(costs, [c["pass_at_k"][0]["value"] for c in cells], marker="o")
    for x, c in zip(costs, cells, strict=True):
        ax.annotate(f"T={c['budget']}", (x, c["pass_at_k"][0]["value"]), fontsize=7)
    ax.set_xlabel(f"mean {metric} per attempt")
    ax.set_ylabel("pass@1")
    ax.set_title("Success vs cost")
    if latency:
        _latency_panel(axes[1], cells)
    _frontier_panel(axes[-1], summary["frontier"], metric)
    fig.suptitle(f"Cost: {run_name(summary)}")
    return save_figure(fig, plt, path)


def plot_comparison(comparison: Mapping[str, Any], path: str | Path) -> Path:
    """Two runs' pass@k against T with intervals, and the difference (b - a)."""
    plt = pyplot()
    rows = comparison["rows"]
    la, lb = comparison["labels"]
    xs = [r["budget"] for r in rows]
    fig, (top, bot) = plt.subplots(2, 1, figsize=(6.0, 6.0), sharex=True)
    colours = dict(zip(("a", "b"), distinct_colours([la, lb]), strict=True))
    for key, lab in (("a", la), ("b", lb)):
        colour = colours[key]
        top.plot(xs, [r[key]["value"] for r in rows], marker="o", label=lab, color=colour)
        lo, hi = [r[key]["lo"] for r in rows], [r[key]["hi"] for r in rows]
        top.fill_between(xs, lo, hi, alpha=0.15, color=colour)
    top.set_ylabel(f"pass@{comparison['k']}")
    top.set_ylim(-0.02, 1.02)
    top.legend(fontsize=8)
    top.set_title(f"{lb} vs {la}: pass@{comparison['k']} by budget")
    diff = [r["diff"] for r in rows]
    bot.axhline(0.0, color="grey", lw=0.8)
    bot.errorbar(
        xs,
        [d["value"] for d in diff],
        yerr=[[d["value"] - d["lo"] for d in diff], [d["hi"] - d["value"] for d in diff]],
        marker="o",
        capsize=3,
        color=colours["b"],
    )
    budget_ticks(bot, xs)
    bot.set_xlabel("turn budget T")
    bot.set_ylabel(f"{lb} - {la}")
    bot.set_title(f"Difference {lb} - {la}")
    return save_figure(fig, plt, path)
