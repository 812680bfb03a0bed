"""The demo's last words: its headline figures and where it wrote everything.

:func:`summary_lines` reads only what the stages returned and the output folder,
so the closing summary is one short block however many stages ran. After the
experiment's figures it prints the run's fingerprint (``summary.json``; recorded
there when the run did not) and whether it matches :data:`DEMO_REFERENCE`, the
fingerprint of the run the README's figures came from.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["DEMO_REFERENCE", "REFRESH_COMMAND", "DemoResults", "fingerprint_line", "summary_lines"]

#: The reference fingerprint, relative to the directory the demo runs in (the clone).
DEMO_REFERENCE = Path("docs/demo_fingerprint.json")
#: How the reference is refreshed from a finished demo run (run in the clone).
REFRESH_COMMAND = (
    'python -c "from budgetmix.training.data.provenance import write_reference_fingerprint as w; '
    "w('runs/demo/experiment/summary.json', 'docs/demo_fingerprint.json')\""
)


@dataclass(frozen=True, slots=True, kw_only=True)
class DemoResults:
    """What the demo's stages returned (``None`` for a stage that did not run) and
    where the spans went, with their count (``RunTracing.finish``'s line)."""

    controller: Mapping[str, Mapping[str, Any]] | None = None
    grid: Mapping[str, Any] | None = None
    train: Mapping[str, Any] | None = None
    traces: str


def _rates(per_budget: Mapping[str, Mapping[str, Any]], key: str = "success_rate") -> str:
    budgets = " / ".join(per_budget)
    return f"{' / '.join(f'{row[key]:.0%}' for row in per_budget.values())} at T = {budgets}"


def _controller_line(per_budget: Mapping[str, Mapping[str, Any]]) -> str:
    mistakes = sum(row["mistakes"] for row in per_budget.values())
    recoveries = sum(row["recoveries"] for row in per_budget.values())
    stopped = sum(
        round(row.get("early_stopped_rate", 0.0) * row["episodes"]) for row in per_budget.values()
    )
    early = f", {stopped} stopped early" if stopped else ""
    return (
        f"1. support agent: success {_rates(per_budget)} "
        f"({mistakes} mistakes, {recoveries} recoveries{early})"
    )


def _grid_line(grid: Mapping[str, Any]) -> str:
    pass1 = grid["pass1"]
    parts = []
    for label in ("aware-oracle", "blind-oracle"):
        cells = pass1.get(label, {})
        parts.append(f"{label} {' / '.join(f'{cells[t][0]:.2f}' for t in cells)}")
    budgets = " / ".join(pass1.get("aware-oracle", {}))
    return f"2. pass@1 at T = {budgets}: {'; '.join(parts)}"


def _train_lines(train: Mapping[str, Any]) -> list[str]:
    report = train["report"]
    lines = []
    vs_fixed = [r for r in report["comparison"] if r.get("versus", "fixed") == "fixed"]
    arms = sorted({row["arm"] for row in vs_fixed})
    for arm in arms:
        rows = [r for r in vs_fixed if r["arm"] == arm]
        diffs = " / ".join(f"{100 * r['diff']:+.1f}" for r in rows)
        fractions = " / ".join(f"{r['fraction']}" for r in rows)
        lines.append(f"3. {arm} minus fixed, pass@1 points: {diffs} at {fractions} of the ceiling")
    if not arms:
        lines.append("3. experiment: no fixed-vs-BudgetMix comparison in this preset")
    primary = report.get("stats", {}).get("primary")
    if primary:
        lines.append(
            f"   primary endpoint (prereg, {primary['n']} seeds): {100 * primary['mean']:+.1f} "
            f"[{100 * primary['lo']:+.1f}, {100 * primary['hi']:+.1f}] points, p {primary['p']:.3f}"
        )
    sens = report.get("diagnostics", {}).get("sensitivity") or {}
    if sens:
        shown = ", ".join(f"{arm} {s['mean']:+.2f}" for arm, s in sens.items())
        lines.append(f"   budget sensitivity at the start cell (oracle 1, blind 0): {shown}")
    deployed = train.get("deployed")
    if deployed:
        lines.append(f"4. deployed checkpoint: success {_rates(deployed)}")
    summary = report.get("files", {}).get("summary")
    if summary is not None and Path(summary).is_file():
        lines.append(fingerprint_line(Path(summary), report.get("config", {}), DEMO_REFERENCE))
    return lines


def fingerprint_line(summary: Path, config: Mapping[str, Any], reference: Path) -> str:
    """The run's fingerprint digest from ``summary`` (recorded there first when absent:
    the experiment's checkpoints lie beside it) and whether it matches ``reference``."""
    from budgetmix.training.data.provenance import (
        fingerprint_differences,
        read_fingerprint,
        record_run_fingerprint,
    )

    mine = read_fingerprint(summary)
    if mine is None:
        threads = int(config.get("threads", 1))
        data = [config.get("base_model")]
        mine = record_run_fingerprint(summary, config, summary.parent, threads=threads, data=data)
    head = f"   fingerprint {mine['digest'][:16]} ({summary})"
    ref = read_fingerprint(reference)
    if ref is None:
        return f"{head}: no reference fingerprint recorded in {reference}"
    differs = fingerprint_differences(mine, ref)
    if not differs:
        return f"{head}: matches {reference} (the README's figures)"
    return f"{head}: differs from {reference} (the README's figures) in {'; '.join(differs)}"


def _plots(out: Path) -> str:
    """How many PNGs lie where under ``out``, one entry per top folder."""
    where = Counter(_folder(p.relative_to(out)) for p in out.rglob("*.png"))
    if not where:
        return "none"
    return ", ".join(f"{out / folder} ({n})" for folder, n in sorted(where.items()))


def _folder(path: Path) -> str:
    parts = path.parent.parts
    if not parts:
        return "."
    return parts[0] if len(parts) == 1 else f"{parts[0]}/*"


def summary_lines(out: Path, results: DemoResults) -> list[str]:
    """The closing summary: one line of headline figures per stage that ran, then
    where the traces, reports and plots are."""
    lines: list[str] = []
    if results.controller:
        lines.append(_controller_line(results.controller))
    if results.grid:
        lines.append(_grid_line(results.grid))
    if results.train:
        lines.extend(_train_lines(results.train))
    lines.append(f"Written to {out}:")
    lines.append(f"  traces   {results.traces}")
    if results.controller:
        lines.append(f"  support  {out / 'controller.json'}")
    if results.grid:
        lines.append(
            f"  grid     {out / 'grid'}/<agent>/report.md, comparison "
            f"{out / 'grid' / 'aware-vs-blind'}"
        )
    if results.train:
        files = results.train["report"].get("files", {})
        report = files.get("report", out / "experiment" / "report.md")
        summary = files.get("summary", out / "experiment" / "summary.json")
        lines.append(f"  report   {report} ({summary})")
    lines.append(f"  plots    {_plots(out)}")
    return lines
