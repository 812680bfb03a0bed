"""``budgetmix demo``: the main job on embedded defaults (no API key, no server).

Stages, each shown as it runs:

1. ``controller`` — a production-style support agent (real tool functions, a
   scripted model that makes mistakes and recovers) under several turn budgets:
   per-episode outcomes, a summary table, traces written to ``runs/``.
2. ``grid`` — a Pass@(K,T) grid on the embedded FrozenLake environment with
   scripted agents (budget-aware oracle, budget-blind oracle, noisy oracle).
3. ``train`` — the BudgetMix-vs-fixed experiment on a tiny local model, its
   diagnostics, and the trained model deployed as an agent under the controller.
"""

from __future__ import annotations

import argparse
import json
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from budgetmix.cli._errors import (
    CliParser,
    UsageError,
    blame,
    json_object,
    output_dir,
    run_command,
)
from budgetmix.cli.tracing import add_trace_argument
from budgetmix.events import EpisodeResult, EpisodeStatus
from budgetmix.semconv import CAPTURE_CONTENT_ENV
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from budgetmix.cli.demo_agent import SupportRun

__all__ = ["DemoOptions", "demo_main", "parse_demo_args"]

PROG = "budgetmix demo"
STAGES = ("controller", "grid", "train")


@dataclass(frozen=True, slots=True)
class DemoOptions:
    """A validated ``budgetmix demo`` command line."""

    stages: tuple[str, ...]
    out: Path
    policy: dict[str, Any]
    quick: bool = False
    full: bool = False
    trace: str | None = None
    capture_content: bool = False


def _parser() -> CliParser:
    p = CliParser(
        prog=PROG,
        description="Run the budgetmix main job on embedded defaults (no API key needed): "
        "7 min 01 s wall, 617 CPU s on two idle cores with `bash run.sh demo` on a fresh "
        "clone, set-up from the wheel cache included (measured 2026-12-04).",
    )
    size = p.add_mutually_exclusive_group()
    size.add_argument(
        "--quick",
        action="store_true",
        help="reduced run: 63 s wall, 86 CPU s on two idle cores (measured 2026-12-04, "
        "fresh output folder); the test suite runs it",
    )
    size.add_argument(
        "--full",
        action="store_true",
        help="more seeds and samples (train stage: the preregistered full design, 8 seeds)",
    )
    p.add_argument("--out", default="runs/demo", help="output folder (default: runs/demo)")
    p.add_argument(
        "--stages",
        default=",".join(STAGES),
        help=f"comma-separated subset of {','.join(STAGES)}",
    )
    p.add_argument(
        "--notice", default=None, help="notice policy kind, e.g. every_turn, final_turn, off"
    )
    p.add_argument("--exhaustion", default=None, choices=["end", "raise", "grace"])
    p.add_argument("--early-stop", default=None, help="early-stop policy kind, e.g. no_progress")
    p.add_argument(
        "--policy",
        default=None,
        help='policy config as JSON, e.g. \'{"notice": {"kind": "at_most", "turns": 2}}\'',
    )
    add_trace_argument(p, None, unset="OTEL_TRACES_EXPORTER if set, else jsonl")
    p.add_argument(
        "--capture-content",
        action="store_true",
        help="put message content and tool arguments on the spans (masked), as "
        f"{CAPTURE_CONTENT_ENV}=true does",
    )
    return p


def _policy_config(args: argparse.Namespace) -> dict[str, Any]:
    """The policy config of ``--policy`` and the single-policy flags, each checked on its own."""
    from budgetmix.policies import policy_from_config

    config = json_object("--policy", args.policy) if args.policy is not None else {}
    with blame("--policy"):
        policy_from_config(config)
    for flag, key, value in (
        ("--notice", "notice", args.notice),
        ("--exhaustion", "exhaustion", args.exhaustion),
        ("--early-stop", "early_stop", args.early_stop),
    ):
        if value is not None:
            with blame(flag):
                policy_from_config({key: value})
            config[key] = value
    with blame("--policy"):
        policy_from_config(config)
    return config


def parse_demo_args(argv: Sequence[str]) -> DemoOptions:
    """The validated options ``argv`` describes; nothing is run or written.

    Raises:
        UsageError: an unknown stage, a bad policy or output folder; names the flag.
        SystemExit: argparse's own errors (exit status 2, one stderr line) and ``--help``.
    """
    args = _parser().parse_args(list(argv))
    stages = tuple(s.strip() for s in args.stages.split(",") if s.strip())
    unknown = sorted(set(stages) - set(STAGES))
    if unknown:
        raise UsageError("--stages", f"unknown stage(s) {unknown}; known: {', '.join(STAGES)}")
    if not stages:
        raise UsageError("--stages", f"no stage given; known: {', '.join(STAGES)}")
    return DemoOptions(
        stages=stages,
        out=output_dir("--out", args.out),
        policy=_policy_config(args),
        quick=args.quick,
        full=args.full,
        trace=args.trace,
        capture_content=args.capture_content,
    )


def _stage_controller(console: Console, out: Path, args: DemoOptions) -> dict[str, Any]:
    from budgetmix.cli.demo_agent import run_support_episodes
    from budgetmix.policies import build_controller_kwargs

    config = args.policy
    kwargs = build_controller_kwargs(config)
    # the raise mode would stop the demo at the first exhaustion: show it as an outcome
    if kwargs.get("exhaustion") == "raise":
        console.print("[yellow]exhaustion=raise is shown as the outcome budget_exhausted here[/]")
        kwargs["exhaustion"] = "end"
    budgets = [2, 4, 6] if args.quick else [2, 3, 4, 6, 8]
    seeds = list(range(4 if args.quick else (24 if args.full else 10)))
    runs = run_support_episodes(budgets, seeds, kwargs)
    console.print(_episode_table(runs))
    per_budget = {str(t): _budget_row([r.result for r in runs if r.turns == t]) for t in budgets}
    console.print(_budget_table(per_budget))
    stops = Counter(
        r.result.stop_reason for r in runs if r.result.status is EpisodeStatus.EARLY_STOPPED
    )
    for reason, n in sorted(stops.items(), key=lambda item: str(item[0])):
        console.print(f"stopped early ({n} episodes): {reason}")
    (out / "controller.json").write_text(
        json.dumps({"policy": config, "per_budget": per_budget}, indent=2)
    )
    return per_budget


def _episode_table(runs: Sequence[SupportRun]) -> Table:
    """Every episode (every n-th past 20), with how it ended."""
    table = Table(title="Support agent under turn budgets (scripted model with mistakes)")
    for col in ("T", "seed", "status", "stop", "turns", "tools", "mistakes", "recov.", "grace"):
        table.add_column(col, no_wrap=True)
    for r in runs if len(runs) <= 20 else runs[:: max(1, len(runs) // 20)]:
        res = r.result
        table.add_row(
            str(r.turns),
            str(r.seed),
            str(res.status),
            res.stop_reason or "-",
            str(res.turns_used),
            str(res.used["tool_calls"]),
            str(len(res.mistakes)),
            str(len(res.recoveries)),
            "yes" if res.grace_turn else "-",
        )
    return table


def _budget_row(results: Sequence[EpisodeResult]) -> dict[str, Any]:
    """Outcome rates and counts of the episodes of one budget."""
    n = len(results)
    statuses = Counter(r.status for r in results)
    return {
        "episodes": n,
        "success_rate": statuses[EpisodeStatus.SUCCESS] / n,
        "exhausted_rate": statuses[EpisodeStatus.BUDGET_EXHAUSTED] / n,
        "early_stopped_rate": statuses[EpisodeStatus.EARLY_STOPPED] / n,
        "mean_turns": sum(r.turns_used for r in results) / n,
        "mistakes": sum(len(r.mistakes) for r in results),
        "recoveries": sum(len(r.recoveries) for r in results),
    }


def _budget_table(per_budget: dict[str, dict[str, Any]]) -> Table:
    table = Table(title="Summary per budget T")
    columns = ("T", "episodes", "success", "exhausted", "stopped early", "mean turns")
    for col in (*columns, "mistakes", "recoveries"):
        table.add_column(col)
    for t, row in per_budget.items():
        table.add_row(
            t,
            str(row["episodes"]),
            f"{row['success_rate']:.0%}",
            f"{row['exhausted_rate']:.0%}",
            f"{row['early_stopped_rate']:.0%}",
            f"{row['mean_turns']:.2f}",
            str(row["mistakes"]),
            str(row["recoveries"]),
        )
    return table


def demo_main(argv: Sequence[str]) -> int:
    """Run the demo; returns the exit code (2 after one stderr line naming a bad flag)."""
    return run_command(PROG, lambda: _run(parse_demo_args(argv)))


def _run(args: DemoOptions) -> int:
    stages, out = args.stages, args.out
    with blame("--out", OSError):
        out.mkdir(parents=True, exist_ok=True)
    console = Console(width=max(100, Console().width))

    from budgetmix.cli.demo_stages import stage_grid, stage_train
    from budgetmix.cli.demo_summary import DemoResults, summary_lines
    from budgetmix.cli.tracing import start_tracing

    results: dict[str, Any] = {}
    if args.capture_content:  # every controller of the run reads it
        os.environ[CAPTURE_CONTENT_ENV] = "true"
    with blame("--trace"):
        tracing = start_tracing(args.trace, out)
    try:
        if "controller" in stages:
            console.rule("[bold]1. The controller wrapping a production-style agent loop")
            results["controller"] = _stage_controller(console, out, args)
        if "grid" in stages:
            console.rule("[bold]2. Pass@(K,T) grid on embedded environments")
            results["grid"] = stage_grid(console, out, quick=args.quick, full=args.full)
        if "train" in stages:
            console.rule("[bold]3. BudgetMix RL vs fixed-budget RL on a tiny local model")
            results["train"] = stage_train(console, out, quick=args.quick, full=args.full)
    finally:
        traced = tracing.finish()
    console.rule("[bold]Summary")
    done = DemoResults(**results, traces=traced)
    for line in summary_lines(out, done):
        console.print(line, highlight=False, soft_wrap=True)
    return 0
