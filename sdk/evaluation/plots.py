"""PNG plots of a summary (matplotlib, Agg backend, imported lazily).

* :func:`plot_heatmap`: Pass@(K,T), k down, T across, values annotated.
* :func:`plot_success_curves`: pass@k against T, one line per k, interval bands;
  extrapolated budgets are shaded.
* :func:`plot_cost_curves`: success against mean cost per attempt, latency
  p50/p95/p99 against T, and the (k, T) cost frontier.
* :func:`plot_comparison`: pass@k of two runs against T and their difference.

Each raises :class:`~budgetmix.MissingExtraError` (``plots`` extra) when
matplotlib is not installed.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from budgetmix._deps import require

__all__ = [
    "plot_comparison",
    "plot_cost_curves",
    "plot_heatmap",
    "plot_success_curves",
    "pyplot",
    "save_figure",
]


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
    ax.set_title("Pass@(k, T)")
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


def plot_success_curves(summary: Mapping[str, Any], path: str | Path) -> Path:
    """pass@k against T for every k, with interval bands."""
    plt = pyplot()
    cells = summary["cells"]
    xs = [c["budget"] for c in cells]
    fig, ax = plt.subplots(figsize=(6.0, 4.0))
    for k in range(1, int(summary["max_k"]) + 1):
        est = [c["pass_at_k"][k - 1] for c in cells]
        ax.plot(xs, [e["value"] for e in est], marker="o", label=f"pass@{k}")
        ax.fill_between(xs, [e["lo"] for e in est], [e["hi"] for e in est], alpha=0.12)
    extra = [c["budget"] for c in cells if c.get("extrapolated")]
    if extra:
        ax.axvspan(
            min(extra) - 0.5,
            max(extra) + 0.5,
            color="grey",
            alpha=0.1,
            label="beyond training ceiling",
        )
    ax.set_xlabel("turn budget T")
    ax.set_ylabel("success")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("Success vs budget")
    ax.legend(fontsize=7, ncol=2)
    return save_figure(fig, plt, path)


def plot_cost_curves(summary: Mapping[str, Any], path: str | Path) -> Path:
    """Success vs cost per attempt, latency percentiles vs T, and the (k, T) frontier."""
    plt = pyplot()
    cells = summary["cells"]
    metric = summary["frontier"]["metric"]
    fig, axes = plt.subplots(1, 3, figsize=(14.0, 4.0))
    ax = axes[0]
    costs = [c["cost"]["cost_usd" if metric == "cost_usd" else metric] for c in cells]
    ax.plot(costs, [c["pass_at_k"][0]["value"] for c in cells], marker="o")
    for x, c in zip(costs, cells, strict=True):
        ax.annotate(f"T={c['budget']}", (x, c["pass_at_k"][0]["value"]), fontsize=7)
    ax.set_xlabel(f"mean {metric} per attempt")
    ax.set_ylabel("pass@1")
    ax.set_title("Success vs cost")
    ax = axes[1]
    xs = [c["budget"] for c in cells]
    for q in ("p50", "p95", "p99"):
        ax.plot(xs, [c["cost"][f"latency_{q}"] for c in cells], marker="o", label=q)
    ax.set_xlabel("turn budget T")
    ax.set_ylabel("episode latency (s)")
    ax.set_title("Latency")
    ax.legend(fontsize=7)
    ax = axes[2]
    pts = summary["frontier"]["points"]
    ax.scatter([p["cost"] for p in pts], [p["success"] for p in pts], s=12, alpha=0.5)
    par = summary["frontier"]["pareto"]
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
    return save_figure(fig, plt, path)


def plot_comparison(comparison: Mapping[str, Any], path: str | Path) -> Path:
    """Two runs' pass@k against T with intervals, and the difference (b - a)."""
    plt = pyplot()
    rows = comparison["rows"]
    la, lb = comparison["labels"]
    xs = [r["budget"] for r in rows]
    fig, (top, bot) = plt.subplots(2, 1, figsize=(6.0, 6.0), sharex=True)
    for key, lab in (("a", la), ("b", lb)):
        top.plot(xs, [r[key]["value"] for r in rows], marker="o", label=lab)
        top.fill_between(xs, [r[key]["lo"] for r in rows], [r[key]["hi"] for r in rows], alpha=0.15)
    top.set_ylabel(f"pass@{comparison['k']}")
    top.set_ylim(-0.02, 1.02)
    top.legend(fontsize=8)
    top.set_title(f"{lb} vs {la}")
    diff = [r["diff"] for r in rows]
    bot.axhline(0.0, color="grey", lw=0.8)
    bot.errorbar(
        xs,
        [d["value"] for d in diff],
        yerr=[[d["value"] - d["lo"] for d in diff], [d["hi"] - d["value"] for d in diff]],
        marker="o",
        capsize=3,
    )
    bot.set_xlabel("turn budget T")
    bot.set_ylabel(f"{lb} - {la}")
    return save_figure(fig, plt, path)
