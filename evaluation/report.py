"""Reports rebuilt from a results file: summary JSON, markdown tables, PNG plots.

:func:`build_report` reads a results JSONL and writes into ``out_dir``:
``summary.json`` (:func:`~.metrics.summarize` plus the run header),
``report.md`` (the grid with intervals, failure breakdown, recovery, cost) and,
unless ``plots=False``, ``pass_kt_heatmap.png``, ``success_vs_budget.png`` and
``cost_curves.png``. Nothing is kept between calls: the file is the source.

:func:`compare_runs` puts two results files side by side: pass@k per budget for
each with its interval and the difference ``b - a`` with a bootstrap interval
over tasks (paired when both runs hold the same tasks); it writes
``comparison.json``, ``comparison.md`` and ``comparison.png``.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from budgetmix.evaluation.failures import FAILURE_CATEGORIES
from budgetmix.evaluation.metrics import summarize
from budgetmix.evaluation.passk import (
    TaskCounts,
    bootstrap_difference,
    pass_at_k,
    pass_at_k_summary,
)
from budgetmix.evaluation.results import EpisodeRecord, read_results
from budgetmix.exceptions import ConfigError

__all__ = ["build_report", "compare_runs", "markdown_report"]

PathLike = str | os.PathLike[str]


def _ci(e: Mapping[str, Any]) -> str:
    return f"{e['value']:.3f} [{e['lo']:.3f}, {e['hi']:.3f}]"


def _opt(x: float | None, fmt: str = ".3f") -> str:
    return "-" if x is None else format(x, fmt)


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def _title_lines(summary: Mapping[str, Any], title: str) -> list[str]:
    """The title, the run's identity (when known) and the grid's description."""
    lines = [f"# {title}", ""]
    hdr = summary.get("header", {})
    if hdr:
        ident = hdr.get("identity", {})
        lines += [
            f"Run `{hdr.get('fingerprint', '?')}`: "
            + ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(ident.items())),
            "",
        ]
    methods = summary["ci_methods"]
    lines += [
        f"{summary['episodes']} episodes, {len(summary['tasks'])} tasks, K={summary['max_k']}, "
        f"{int(summary['level'] * 100)}% intervals: per task {methods['per_task']}; "
        f"overall {methods['overall']}. `*` = budget beyond the training ceiling.",
        "",
    ]
    return lines


def _grid_lines(summary: Mapping[str, Any]) -> list[str]:
    """Pass@(k, T) with intervals per budget, and the spread of pass@1 across budgets."""
    ks = range(1, int(summary["max_k"]) + 1)
    rows = []
    for c in summary["cells"]:
        t = f"{c['budget']}*" if c["extrapolated"] else str(c["budget"])
        rows.append([t, str(c["episodes"]), *(_ci(c["pass_at_k"][k - 1]) for k in ks)])
    return [
        "## Pass@(k, T)",
        "",
        *_table(["T", "episodes", *(f"pass@{k}" for k in ks)], rows),
        "",
        f"Std of pass@1 across budgets: {summary['pass1_std_across_budgets']:.3f}",
        "",
    ]


def _failure_lines(cells: Sequence[Mapping[str, Any]]) -> list[str]:
    """The share of episodes per failure category seen in any cell."""
    cats = [c for c in FAILURE_CATEGORIES if any(cell["failures"].get(c) for cell in cells)]
    rows = [
        [str(c["budget"]), *(f"{c['failures'].get(k, 0) / c['episodes']:.2f}" for k in cats)]
        for c in cells
    ]
    return ["## Failure breakdown (share of episodes)", "", *_table(["T", *cats], rows)]


_RECOVERY_COLUMNS = (
    ("mistakes/call", "mistake_rate", ".3f"),
    ("eps w/ mistake", "episodes_with_mistakes", ".2f"),
    ("recovery rate", "recovery_rate", ".3f"),
    ("turns to recover", "turns_to_recover_mean", ".2f"),
    ("recovered in budget", "recovered_in_budget", ".3f"),
    ("success after mistake", "success_after_mistake", ".3f"),
)
_FAULT_COLUMNS = (
    ("fault step", "fault_step", None),
    ("budget left", "budget_left", None),
    ("reached", "episodes_reached", None),
    ("recovered", "recovered", ".3f"),
    ("solved", "solved", ".3f"),
    ("turns to recover", "turns_to_recover_mean", ".2f"),
)
_COST_COLUMNS = (
    ("model calls", "model_calls", ".2f"),
    ("env calls", "env_calls", ".2f"),
    ("tool calls", "tool_calls", ".2f"),
    ("tokens", "tokens", ".0f"),
    ("USD", "cost_usd", ".4f"),
    ("p50 s", "latency_p50", ".3f"),
    ("p95 s", "latency_p95", ".3f"),
    ("p99 s", "latency_p99", ".3f"),
    ("exhausted", "exhaustion_rate", ".2f"),
)


def _columns_table(
    columns: Sequence[tuple[str, str, str | None]],
    rows: Sequence[tuple[int, Mapping[str, Any]]],
) -> list[str]:
    """A table with T first, then one column per ``(head, key, format)``.

    A ``None`` format prints the value with ``str``; otherwise a ``None`` value
    prints as ``-``.
    """
    body = [
        [
            str(budget),
            *(str(v[key]) if fmt is None else _opt(v[key], fmt) for _, key, fmt in columns),
        ]
        for budget, v in rows
    ]
    return _table(["T", *(head for head, _, _ in columns)], body)


def _recovery_lines(cells: Sequence[Mapping[str, Any]]) -> list[str]:
    """Mistakes, recovery, and the injected fault when the run had one."""
    lines = ["## Recovery", ""]
    lines += _columns_table(_RECOVERY_COLUMNS, [(c["budget"], c["recovery"]) for c in cells])
    faults = [(c["budget"], c["recovery"]["fault"]) for c in cells if "fault" in c["recovery"]]
    if faults:
        lines += ["", "## Injected fault", "", *_columns_table(_FAULT_COLUMNS, faults)]
    return lines


def _cost_lines(cells: Sequence[Mapping[str, Any]]) -> list[str]:
    """Means per episode of calls, tokens and USD; latency percentiles; exhaustion."""
    rows = [(c["budget"], c["cost"]) for c in cells]
    return ["## Cost per episode", "", *_columns_table(_COST_COLUMNS, rows)]


def _frontier_lines(frontier: Mapping[str, Any]) -> list[str]:
    """The Pareto points of (k, T): the best pass@k at each cost."""
    rows = [
        [f"{p['cost']:.2f}", str(p["k"]), str(p["budget"]), f"{p['success']:.3f}"]
        for p in frontier["pareto"]
    ]
    return [
        f"## Best (k, T) at a cost ({frontier['metric']} = k x mean per attempt)",
        "",
        *_table(["cost", "k", "T", "pass@k"], rows),
    ]


def markdown_report(summary: Mapping[str, Any], *, title: str = "Pass@(K,T) evaluation") -> str:
    """The markdown of a summary: grid, failures, recovery, cost, frontier."""
    cells = summary["cells"]
    lines = _title_lines(summary, title) + _grid_lines(summary) + _failure_lines(cells)
    for section in (
        _recovery_lines(cells),
        _cost_lines(cells),
        _frontier_lines(summary["frontier"]),
    ):
        lines += ["", *section]
    return "\n".join(lines) + "\n"


def _load(path: PathLike) -> tuple[Mapping[str, Any], list[EpisodeRecord]]:
    rf = read_results(path)
    if not rf.records:
        raise ConfigError(f"results file {str(path)!r} holds no episodes")
    return rf.header, list(rf.records)


def build_report(
    results_path: PathLike,
    out_dir: PathLike,
    *,
    plots: bool = True,
    level: float = 0.95,
    n_boot: int = 1000,
    seed: int = 0,
) -> dict[str, Path]:
    """Rebuild summary, markdown and plots from ``results_path``; returns the files written.

    Raises:
        ConfigError: a missing or empty results file.
        MissingExtraError: ``plots`` and matplotlib is not installed (the JSON and
            markdown are written first).
    """
    header, records = _load(results_path)
    summary = summarize(records, level=level, n_boot=n_boot, seed=seed)
    summary["header"] = {k: header.get(k) for k in ("fingerprint", "identity", "created")}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = {"summary": out / "summary.json", "markdown": out / "report.md"}
    files["summary"].write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    files["markdown"].write_text(markdown_report(summary))
    if plots:
        from budgetmix.evaluation import plots as pl

        files["heatmap"] = pl.plot_heatmap(summary, out / "pass_kt_heatmap.png")
        files["success_curves"] = pl.plot_success_curves(summary, out / "success_vs_budget.png")
        files["cost_curves"] = pl.plot_cost_curves(summary, out / "cost_curves.png")
    return files


def _per_task(records: Sequence[EpisodeRecord]) -> dict[int, dict[str, tuple[int, int]]]:
    acc: dict[int, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for r in records:
        cell = acc[r.budget][r.task_id]
        cell[0] += 1
        cell[1] += int(r.success)
    return {b: {t: (v[0], v[1]) for t, v in ts.items()} for b, ts in acc.items()}


def _compare_budget(
    a: Mapping[str, tuple[int, int]],
    b: Mapping[str, tuple[int, int]],
    budget: int,
    *,
    k: int,
    level: float,
    n_boot: int,
    seed: int,
) -> dict[str, Any]:
    """One budget's comparison row: each run's pass@k and the difference ``b - a``."""
    side: dict[str, Any] = {}
    vals: dict[str, dict[str, float]] = {}
    for key, cells in (("a", a), ("b", b)):
        counts = [TaskCounts(task, n, c) for task, (n, c) in sorted(cells.items())]
        summ = pass_at_k_summary(counts, k, level=level, n_boot=n_boot, seed=seed)
        side[key] = summ.overall[k - 1].to_dict()
        vals[key] = {task: pass_at_k(n, c, k) for task, (n, c) in cells.items()}
    diff, lo, hi, paired = bootstrap_difference(
        vals["a"], vals["b"], level=level, n_boot=n_boot, seed=seed + budget
    )
    return {"budget": budget, **side, "diff": {"value": diff, "lo": lo, "hi": hi}, "paired": paired}


def _comparison_markdown(comparison: Mapping[str, Any]) -> str:
    """``comparison.md``: one row per budget, ``b - a`` with its interval."""
    la, lb = comparison["labels"]
    k, level = comparison["k"], comparison["level"]
    md = [
        f"# {lb} vs {la}: pass@{k} per budget",
        "",
        f"{int(level * 100)}% intervals; difference = {lb} - {la}, bootstrap over tasks.",
        "",
    ]
    md += _table(
        ["T", la, lb, f"{lb} - {la}", "paired"],
        [
            [str(r["budget"]), _ci(r["a"]), _ci(r["b"]), _ci(r["diff"]), str(r["paired"])]
            for r in comparison["rows"]
        ],
    )
    return "\n".join(md) + "\n"


def compare_runs(
    a_path: PathLike,
    b_path: PathLike,
    out_dir: PathLike,
    labels: tuple[str, str] = ("a", "b"),
    *,
    k: int = 1,
    plots: bool = True,
    level: float = 0.95,
    n_boot: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """Compare pass@k per budget of two runs; writes JSON, markdown and a plot.

    Only budgets present in both runs are compared. Returns the comparison dict
    (``rows``: budget, ``a``/``b`` estimates, ``diff`` with interval, ``paired``).

    Raises:
        ConfigError: no common budget, or ``k`` above a run's samples per task.
        MissingExtraError: ``plots`` and matplotlib is not installed.
    """
    _, ra = _load(a_path)
    _, rb = _load(b_path)
    ca, cb = _per_task(ra), _per_task(rb)
    common = sorted(set(ca) & set(cb))
    if not common:
        raise ConfigError("the two runs share no budget")
    rows = [
        _compare_budget(ca[t], cb[t], t, k=k, level=level, n_boot=n_boot, seed=seed) for t in common
    ]
    comparison: dict[str, Any] = {
        "labels": list(labels),
        "k": k,
        "level": level,
        "rows": rows,
        "a": str(a_path),
        "b": str(b_path),
    }
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "comparison.json").write_text(json.dumps(comparison, indent=2) + "\n")
    (out / "comparison.md").write_text(_comparison_markdown(comparison))
    comparison["files"] = {
        "json": str(out / "comparison.json"),
        "markdown": str(out / "comparison.md"),
    }
    if plots:
        from budgetmix.evaluation.plots import plot_comparison

        comparison["files"]["plot"] = str(plot_comparison(comparison, out / "comparison.png"))
    return comparison
