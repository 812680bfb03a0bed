"""The demo's later stages: the Pass@(K,T) grid and the training experiment.

Kept apart from :mod:`budgetmix.cli.demo` so that module stays about the command
line and the controller stage.
"""

from __future__ import annotations

import contextlib
import json
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

__all__ = ["stage_grid", "stage_train"]

#: Slippery FrozenLake where the budget matters (PAPER.md: success_rate 0.6-0.8).
GRID_ENV = {"map_name": "random", "size": 5, "success_rate": 0.8}

_AGENTS = (
    ("aware-oracle", ["--agent", "oracle"]),
    ("blind-oracle", ["--agent", "oracle", "--blind"]),
    ("noisy-oracle", ["--agent", "noisy"]),
)


def _pass1(summary: dict[str, Any]) -> dict[int, tuple[float, float, float]]:
    out: dict[int, tuple[float, float, float]] = {}
    for cell in summary["cells"]:
        p = cell["pass_at_k"][0]
        out[int(cell["budget"])] = (p["value"], p["lo"], p["hi"])
    return out


def _quiet_eval(
    console: Console, eval_main: Callable[[list[str]], int], argv: list[str], run_dir: Path
) -> dict[str, Any]:
    """Run ``budgetmix eval argv`` with its report in ``run_dir/eval.log``, not the terminal;
    prints its one-line account of the episodes run and returns its summary."""
    run_dir.mkdir(parents=True, exist_ok=True)
    log = run_dir / "eval.log"
    with log.open("w") as stream, contextlib.redirect_stdout(stream):
        code = eval_main([*argv, "--no-progress"])
    if code != 0:
        raise SystemExit(code)
    console.print(f"  {log.read_text().splitlines()[0]}", highlight=False)
    summary: dict[str, Any] = json.loads((run_dir / "summary.json").read_text())
    return summary


def stage_grid(console: Console, out: Path, *, quick: bool, full: bool) -> dict[str, Any]:
    """Evaluate three scripted agents on a Pass@(K,T) grid and print pass@1 side by side."""
    from budgetmix.cli.eval import eval_main
    from budgetmix.evaluation import compare_runs

    tasks, k = (4, 2) if quick else ((16, 8) if full else (8, 4))
    budgets = "4,8,12,16,24"
    summaries: dict[str, dict[str, Any]] = {}
    for label, agent_args in _AGENTS:
        run_dir = out / "grid" / label
        argv = [
            "--env",
            "frozenlake",
            "--env-kwargs",
            json.dumps(GRID_ENV),
            "--tasks",
            str(tasks),
            "--budgets",
            budgets,
            "-k",
            str(k),
            "--training-ceiling",
            "16",
            "--out",
            str(run_dir),
            *agent_args,
        ]
        console.print(f"[bold]{label}[/]: {shlex.join(['budgetmix', 'eval', *argv])}")
        summaries[label] = _quiet_eval(console, eval_main, argv, run_dir)

    table = Table(title=f"pass@1 by budget T (95% CI), {tasks} random 5x5 maps, K={k}")
    table.add_column("T")
    for label, _ in _AGENTS:
        table.add_column(label)
    p1 = {label: _pass1(s) for label, s in summaries.items()}
    for t in sorted(p1["aware-oracle"]):
        table.add_row(
            f"{t}{'*' if t > 16 else ''}",
            *(
                f"{p1[lbl][t][0]:.2f} [{p1[lbl][t][1]:.2f}, {p1[lbl][t][2]:.2f}]"
                for lbl, _ in _AGENTS
            ),
        )
    console.print(table)
    console.print("* beyond the training ceiling (budget extrapolation)")
    comparison = compare_runs(
        out / "grid" / "aware-oracle" / "results.jsonl",
        out / "grid" / "blind-oracle" / "results.jsonl",
        out / "grid" / "aware-vs-blind",
        labels=("aware", "blind"),
    )
    return {
        "pass1": {lbl: {str(t): v for t, v in rows.items()} for lbl, rows in p1.items()},
        "comparison": comparison.get("rows", []),
    }


def stage_train(console: Console, out: Path, *, quick: bool, full: bool) -> dict[str, Any]:
    """Run the BudgetMix-vs-fixed experiment and deploy its model under the controller."""
    from budgetmix.cli.demo_train import run_train_stage

    result: dict[str, Any] = run_train_stage(console, out, quick=quick, full=full)
    return result
