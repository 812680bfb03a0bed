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
from collections import Counter
from pathlib import Path
from typing import Any

from budgetmix.events import EpisodeStatus
from rich.console import Console
from rich.table import Table

__all__ = ["demo_main"]

STAGES = ("controller", "grid", "train")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="budgetmix demo",
        description="Run the budgetmix main job on embedded defaults (no API key needed).",
    )
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="reduced run (about a minute; CI)")
    size.add_argument("--full", action="store_true", help="more seeds and samples")
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
    return p


def _policy_config(args: argparse.Namespace) -> dict[str, Any]:
    config: dict[str, Any] = json.loads(args.policy) if args.policy else {}
    if args.notice:
        config["notice"] = args.notice
    if args.exhaustion:
        config["exhaustion"] = args.exhaustion
    if args.early_stop:
        config["early_stop"] = args.early_stop
    return config


def _stage_controller(console: Console, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    from budgetmix.demo_agent import run_support_episodes
    from budgetmix.policies import build_controller_kwargs

    config = _policy_config(args)
    kwargs = build_controller_kwargs(config)
    # the raise mode would stop the demo at the first exhaustion: show it as an outcome
    if kwargs.get("exhaustion") == "raise":
        console.print("[yellow]exhaustion=raise is shown as the outcome budget_exhausted here[/]")
        kwargs["exhaustion"] = "end"
    budgets = [2, 4, 6] if args.quick else [2, 3, 4, 6, 8]
    seeds = list(range(4 if args.quick else (24 if args.full else 10)))
    runs = run_support_episodes(budgets, seeds, kwargs)

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
            str(int(res.used["tool_calls"])),
            str(len(res.mistakes)),
            str(len(res.recoveries)),
            "yes" if res.grace_turn else "-",
        )
    console.print(table)

    summary = Table(title="Summary per budget T")
    for col in ("T", "episodes", "success", "exhausted", "mean turns", "mistakes", "recoveries"):
        summary.add_column(col)
    per_budget: dict[str, Any] = {}
    for t in budgets:
        rs = [r.result for r in runs if r.turns == t]
        statuses = Counter(r.status for r in rs)
        row = {
            "episodes": len(rs),
            "success_rate": statuses[EpisodeStatus.SUCCESS] / len(rs),
            "exhausted_rate": statuses[EpisodeStatus.BUDGET_EXHAUSTED] / len(rs),
            "mean_turns": sum(r.turns_used for r in rs) / len(rs),
            "mistakes": sum(len(r.mistakes) for r in rs),
            "recoveries": sum(len(r.recoveries) for r in rs),
        }
        per_budget[str(t)] = row
        summary.add_row(
            str(t),
            str(row["episodes"]),
            f"{row['success_rate']:.0%}",
            f"{row['exhausted_rate']:.0%}",
            f"{row['mean_turns']:.2f}",
            str(row["mistakes"]),
            str(row["recoveries"]),
        )
    console.print(summary)
    (out / "controller.json").write_text(
        json.dumps({"policy": config, "per_budget": per_budget}, indent=2)
    )
    return per_budget


def demo_main(argv: list[str]) -> int:
    """Run the demo; returns the exit code."""
    args = _parser().parse_args(argv)
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    unknown = sorted(set(stages) - set(STAGES))
    if unknown:
        _parser().error(f"unknown stage(s): {', '.join(unknown)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    console = Console(width=max(100, Console().width))

    from budgetmix.telemetry import configure_tracing

    handle = configure_tracing("jsonl", path=out / "traces.jsonl")
    try:
        if "controller" in stages:
            console.rule("[bold]1. The controller wrapping a production-style agent loop")
            _stage_controller(console, out, args)
        if "grid" in stages:
            from budgetmix.demo_stages import stage_grid

            console.rule("[bold]2. Pass@(K,T) grid on embedded environments")
            stage_grid(console, out, quick=args.quick, full=args.full)
        if "train" in stages:
            from budgetmix.demo_stages import stage_train

            console.rule("[bold]3. BudgetMix RL vs fixed-budget RL on a tiny local model")
            stage_train(console, out, quick=args.quick, full=args.full)
    finally:
        handle.flush()
        stats = handle.stats()
        handle.shutdown()
    console.print(
        f"Traces: {out / 'traces.jsonl'} ({stats.exported} spans exported, {stats.lost} lost)"
    )
    return 0
