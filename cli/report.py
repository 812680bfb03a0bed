"""``budgetmix report``: rebuild an evaluation report from a results file, or compare two.

``report_main(argv)`` returns a process exit code: 0 ok, 2 after one stderr
line (a bad flag, named, or an unreadable results file).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from budgetmix.cli._errors import (
    CliParser,
    UsageError,
    integer,
    output_dir,
    readable_file,
    run_command,
)
from budgetmix.evaluation.report import build_report, compare_runs
from budgetmix.exceptions import BudgetmixError, MissingExtraError

__all__ = ["ReportOptions", "parse_report_args", "report_main", "show_report", "write_report"]


def write_report(results: Path, out: Path, *, plots: bool, n_boot: int) -> dict[str, Path]:
    """Summary, markdown and (when matplotlib is installed) plots of ``results`` into ``out``."""
    try:
        return build_report(results, out, plots=plots, n_boot=n_boot)
    except MissingExtraError as exc:
        print(f"plots skipped: {exc}", file=sys.stderr)
        return {"summary": out / "summary.json", "markdown": out / "report.md"}


def show_report(files: Mapping[str, Path]) -> None:
    """Print the report's grid (the markdown up to the failure breakdown) and the files."""
    print(files["markdown"].read_text().split("## Failure")[0].rstrip())
    print("\nwrote: " + ", ".join(str(p) for p in files.values()))


@dataclass(frozen=True, slots=True)
class ReportOptions:
    """A validated ``budgetmix report`` command line."""

    results: Path
    out: Path
    compare: Path | None = None
    labels: tuple[str, str] = ("a", "b")
    k: int = 1
    plots: bool = True
    n_boot: int = 1000


def parse_report_args(argv: Sequence[str] | None = None) -> ReportOptions:
    """The validated options ``argv`` describes; nothing is read but file metadata.

    Raises:
        UsageError: a missing results file, bad labels or numbers; names the flag.
        SystemExit: argparse's own errors (exit status 2, one stderr line) and ``--help``.
    """
    p = CliParser(
        prog="budgetmix report",
        description="Rebuild summary, markdown and plots from a results JSONL, or compare two.",
    )
    p.add_argument("results", help="results.jsonl of a run")
    p.add_argument("--compare", help="a second results.jsonl (shown as b - a)")
    p.add_argument("--labels", default="a,b", help="names of the two runs, e.g. fixed,budgetmix")
    p.add_argument("-k", type=int, default=1, help="compare pass@k (default 1)")
    p.add_argument("--out", help="output directory (default: next to results)")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--n-boot", type=int, default=1000)
    args = p.parse_args(argv)
    results = readable_file("results", args.results)
    labels = tuple(x.strip() for x in args.labels.split(","))
    if len(labels) != 2 or not all(labels) or labels[0] == labels[1]:
        raise UsageError("--labels", f"expected two different names, got {args.labels!r}")
    return ReportOptions(
        results=results,
        out=output_dir("--out", args.out) if args.out is not None else results.parent,
        compare=None if args.compare is None else readable_file("--compare", args.compare),
        labels=(labels[0], labels[1]),
        k=integer("-k", args.k, low=1),
        plots=not args.no_plots,
        n_boot=integer("--n-boot", args.n_boot, low=1),
    )


def _compare(opts: ReportOptions, compare: Path) -> int:
    def run(plots: bool) -> dict[str, Any]:
        return compare_runs(
            opts.results, compare, opts.out, opts.labels, k=opts.k, plots=plots, n_boot=opts.n_boot
        )

    try:
        cmp = run(opts.plots)
    except MissingExtraError as exc:
        print(f"plots skipped: {exc}", file=sys.stderr)
        cmp = run(False)
    print((opts.out / "comparison.md").read_text().rstrip())
    print("\nwrote: " + ", ".join(cmp["files"].values()))
    return 0


def _run_report(opts: ReportOptions) -> int:
    if opts.compare is not None:
        return _compare(opts, opts.compare)
    show_report(write_report(opts.results, opts.out, plots=opts.plots, n_boot=opts.n_boot))
    return 0


def report_main(argv: Sequence[str] | None = None) -> int:
    """``budgetmix report``: rebuild a report from results, or compare two runs.

    Returns 0, or 2 after one stderr line (a bad flag, named, or an unreadable file).
    """
    return run_command(
        "budgetmix report",
        lambda: _run_report(parse_report_args(argv)),
        errors=(BudgetmixError, ValueError),
    )
