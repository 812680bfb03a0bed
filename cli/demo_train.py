"""The demo's training stage: BudgetMix vs fixed RL, diagnostics, then deployment.

Runs :func:`budgetmix.training.experiment.run_experiment`, prints its tables,
and finally drives the best trained checkpoint as a production agent under the
:class:`~budgetmix.BudgetController` — same notice format, same ledger, traces
written — so the whole contract (train under announced budgets, deploy under
the same ones) is visible in one run.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from budgetmix.budget import Budget
from budgetmix.controller import BudgetController
from budgetmix.events import EpisodeResult, EpisodeStatus
from budgetmix.policy import NotifyEveryTurn
from rich.console import Console
from rich.table import Table

__all__ = ["deploy_checkpoint", "run_train_stage"]

#: Slip seeds of the deployment episodes (disjoint from training and evaluation).
DEPLOY_SEED_BASE = 5_000_000


def _arm_order(arm: str) -> tuple[int, str]:
    return ({"base": 0, "fixed": 1}.get(arm, 2), arm)


def _print_comparison(console: Console, report: Any) -> None:
    arms = sorted({row["arm"] for row in report.grid}, key=_arm_order)
    mix_arms = [a for a in arms if a.startswith("budgetmix")]
    table = Table(title="Pass@1 by budget T (%, 95% CI); BudgetMix minus fixed in points")
    table.add_column("budget")
    for arm in arms:
        table.add_column(arm)
    for arm in mix_arms:
        table.add_column(f"{arm} - fixed")
    table.add_column("paper")
    paper = {"25%": "+7.5", "50%": "+5.3", "75%": "+4.0", "100%": "~0"}
    cell = {(r["arm"], r["fraction"]): r for r in report.grid if r["k"] == 1}
    diff = {
        (r.get("arm", "budgetmix"), r["fraction"]): r
        for r in report.comparison
        if r.get("versus", "fixed") == "fixed"
    }
    for frac, budget in report.budgets.items():
        row = [f"{frac} (T={budget})"]
        for arm in arms:
            r = cell.get((arm, frac))
            row.append(
                "-"
                if r is None
                else f"{100 * r['value']:.1f} [{100 * r['lo']:.0f}, {100 * r['hi']:.0f}]"
            )
        for arm in mix_arms:
            d = diff.get((arm, frac))
            row.append(
                "-"
                if d is None
                else f"{100 * d['diff']:+.1f} [{100 * d['lo']:+.1f}, {100 * d['hi']:+.1f}]"
            )
        row.append(paper.get(frac, "-"))
        table.add_row(*row)
    console.print(table)


def _print_endpoints(console: Console, report: Any) -> None:
    """The preregistered endpoints (docs/prereg.md) and the start-cell budget sensitivity."""
    table = Table(title="Preregistered: mean paired per-seed difference over 25-75% (points)")
    for col in ("A - B", "seeds", "mean [95% t]", "p"):
        table.add_column(col)
    for c in report.stats.get("contrasts", []):
        table.add_row(
            f"{c['arm']} - {c['versus']}",
            str(c["n"]),
            f"{100 * c['mean']:+.1f} [{100 * c['lo']:+.1f}, {100 * c['hi']:+.1f}]",
            f"{c['p']:.3f}",
        )
    console.print(table)
    sens = report.diagnostics.get("sensitivity") or {}
    if sens:
        table = Table(title="Budget sensitivity at the start cell (oracle 1, budget-blind 0)")
        for col in ("arm", "mean [95% t]", "per seed", "noise floor"):
            table.add_column(col)
        for arm, s in sens.items():
            table.add_row(
                arm,
                f"{s['mean']:+.2f} [{s['lo']:+.2f}, {s['hi']:+.2f}]",
                " ".join(f"{r['sensitivity']:+.2f}" for r in s["per_seed"]),
                f"{max(s['noise_floors']):.2f}",
            )
        console.print(table)
    collapses = report.stats.get("collapses", {})
    console.print(
        "collapsed runs (kept): "
        + ", ".join(f"{a} {c['collapsed']}/{c['runs']}" for a, c in collapses.items())
    )


def _share(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _print_diagnostics(console: Console, report: Any) -> None:
    diag = report.diagnostics
    quality = diag.get("action_quality", {})
    if quality:
        n, n_after = diag.get("decision_points"), diag.get("after_mistake_points")
        table = Table(
            title=f"Step-level action quality (expected exact Q, non-tied states), "
            f"{n} states, {n_after} after a mistake"
        )
        cols = ("A vs B", "A better", "tie", "B better", "noise floor", "A better after a mistake")
        for col in cols:
            table.add_column(col)
        for pair, shares in quality.items():
            table.add_row(
                pair,
                _share(shares.get("a_better")),
                _share(shares.get("tie")),
                _share(shares.get("b_better")),
                _share(shares.get("noise_floor")),
                _share(shares.get("a_better_after_mistake")),
            )
        console.print(table)
        console.print(
            "paper (FrozenLake, RL vs base): better in 42.8% of states, 65.7% right after a mistake"
        )
    recovery = diag.get("recovery", {})
    if recovery:
        table = Table(
            title="Recovery injection: a forced mistake, recovered within the budget left"
        )
        for col in ("arm", "T", "inject at", "recovered", "rate [95% CI]"):
            table.add_column(col)
        for arm, rows in recovery.items():
            for r in rows:
                table.add_row(
                    arm,
                    str(r["budget"]),
                    str(r["inject_at"]),
                    f"{r['recovered']}/{r['injected']}",
                    f"{100 * r['rate']:.0f}% [{100 * r['low']:.0f}, {100 * r['high']:.0f}]",
                )
        console.print(table)


def deploy_checkpoint(
    checkpoint: Path,
    desc: tuple[str, ...],
    success_rate: float,
    budgets: list[int],
    episodes: int,
    *,
    notice_format: str = "v1-compact",
) -> dict[int, list[EpisodeResult]]:
    """Run a trained checkpoint as an agent under the controller for each budget."""
    from budgetmix.training.envs.frozenlake_compact import CompactFrozenLake
    from budgetmix.training.serving.serve import TrainedPolicyAgent

    # sampled at temperature 1, as in evaluation: the policy RL trained
    agent = TrainedPolicyAgent.from_pretrained(
        checkpoint, max_new_tokens=4, temperature=1.0, seed=DEPLOY_SEED_BASE
    )
    results: dict[int, list[EpisodeResult]] = {}
    for turns in budgets:
        controller = BudgetController(
            Budget(turns=turns),
            name="frozenlake-agent",
            provider_name="local",
            notice=NotifyEveryTurn(notice_format),
        )
        for i in range(episodes):
            seed = DEPLOY_SEED_BASE + 1000 * turns + i
            env = CompactFrozenLake(desc, success_rate)
            agent.start(env, seed)
            observation = env.reset(seed)
            with controller.episode(metadata={"seed": seed, "budget": turns}) as ep:
                for turn in ep.turns(model=checkpoint.name):
                    action = agent.act(observation, turn.notice, None)
                    assert isinstance(action, str)  # a text environment: stepped here
                    step = env.step(action)
                    ok = step.label.valid and step.label.mistake is None
                    ep.record_step(ok=ok, progress=step.label.progress, mistake=step.label.mistake)
                    observation = step.observation
                    if step.done:
                        ep.finish(success=step.success, output=action)
                        break
            assert ep.result is not None
            results.setdefault(turns, []).append(ep.result)
    return results


#: The confirmatory design (issue 29, docs/prereg.md): a documented command, not the demo.
CONFIRM_COMMAND = (
    "python -m budgetmix.training.experiment.design --preset confirm "
    "--out runs/confirm --error-rate E  (E: the SFT pilot's measured error rate)"
)


def _design_label(config: Any) -> str:
    """What the demo's experiment is: a reduced design, with the VoI gate's verdict on it."""
    from budgetmix.training.experiment.design import gate_verdict

    gate = gate_verdict(config, config.sft_error_rate, source="the demonstrator's rate")
    return (
        f"[bold]Reduced design[/bold] (preset {config.preset!r}: {config.seeds} training seeds, "
        f"{config.eval_episodes} episodes per cell, one SFT base): issue 19's design on the "
        f"demo map, a negative control. VoI gate: {gate['reason']}, so no arm can gain from "
        f"reading the budget here. The confirmatory design: {CONFIRM_COMMAND}"
    )


def run_train_stage(console: Console, out: Path, *, quick: bool, full: bool) -> dict[str, Any]:
    """Train, evaluate, diagnose, deploy; prints every table and returns the numbers."""
    from budgetmix.training.experiment import run_experiment
    from budgetmix.training.experiment.arms import default_workers
    from budgetmix.training.experiment.config import experiment_preset
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # bars drown the demo
    preset = "quick" if quick else ("full" if full else "default")
    config = experiment_preset(preset)
    console.print(_design_label(config))
    workers = default_workers(config)  # RL runs in parallel; the same bytes as in one
    report = run_experiment(config, out / "experiment", progress=True, workers=workers)
    _print_comparison(console, report)
    _print_endpoints(console, report)
    _print_diagnostics(console, report)

    console.rule("[bold]4. The trained model deployed under the controller")
    desc = tuple(report.config["desc"])
    budgets = sorted(set(report.budgets.values()))
    deployed = deploy_checkpoint(
        Path(report.best_checkpoint),
        desc,
        report.config["success_rate"],
        budgets,
        episodes=8 if quick else 24,
    )
    table = Table(title=f"Deployed checkpoint {report.best_checkpoint} (traces in traces.jsonl)")
    for col in ("T", "episodes", "success", "exhausted", "mean turns", "mistakes", "recoveries"):
        table.add_column(col)
    rows: dict[str, Any] = {}
    for t, rs in deployed.items():
        st = Counter(r.status for r in rs)
        rows[str(t)] = {
            "success_rate": st[EpisodeStatus.SUCCESS] / len(rs),
            "exhausted_rate": st[EpisodeStatus.BUDGET_EXHAUSTED] / len(rs),
        }
        table.add_row(
            str(t),
            str(len(rs)),
            f"{st[EpisodeStatus.SUCCESS] / len(rs):.0%}",
            f"{st[EpisodeStatus.BUDGET_EXHAUSTED] / len(rs):.0%}",
            f"{sum(r.turns_used for r in rs) / len(rs):.1f}",
            str(sum(len(r.mistakes) for r in rs)),
            str(sum(len(r.recoveries) for r in rs)),
        )
    console.print(table)
    return {"report": report.to_dict(), "deployed": rows}
