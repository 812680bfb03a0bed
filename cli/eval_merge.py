"""``budgetmix eval-merge``: merge the results shards of one evaluation run.

A grid split over machines or processes (each ``budgetmix eval`` with the same
environment, agent, notice, seeds and policy, so each shard has the run's fingerprint,
over its own tasks or budgets) is merged into ``--out``: ``results.jsonl`` (one header,
every run line, every episode once) and the report ``budgetmix report`` builds.
Shards of different runs (other fingerprints) are refused.

``eval_merge_main(argv)`` returns 0, or 2 after one stderr line naming the problem.
"""

from __future__ import annotations

from collections.abc import Sequence

from budgetmix.cli._errors import CliParser, blame, output_dir, readable_file, run_command

__all__ = ["eval_merge_main"]


def _merge(argv: Sequence[str] | None) -> int:
    from budgetmix.cli.report import show_report, write_report
    from budgetmix.evaluation.results import merge_results

    p = CliParser(
        prog="budgetmix eval-merge",
        description="Merge the results.jsonl shards of one evaluation run, then report.",
    )
    p.add_argument("shards", nargs="+", help="results.jsonl files of one run")
    p.add_argument("--out", required=True, help="output directory of the merged run")
    p.add_argument("--overwrite", action="store_true", help="replace an existing merge")
    p.add_argument("--no-plots", action="store_true")
    args = p.parse_args(argv)
    shards = [readable_file("shards", s) for s in args.shards]
    out = output_dir("--out", args.out)
    with blame("shards"):
        merged = merge_results(out / "results.jsonl", shards, overwrite=args.overwrite)
    show_report(write_report(merged, out, plots=not args.no_plots, n_boot=1000))
    return 0


def eval_merge_main(argv: Sequence[str] | None = None) -> int:
    """``budgetmix eval-merge SHARD... --out DIR``; returns the exit status."""
    return run_command("budgetmix eval-merge", lambda: _merge(argv))
