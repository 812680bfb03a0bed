"""Writes an experiment report (:mod:`budgetmix.training.experiment`) as markdown, PNGs, JSON.

Files in the report's ``out_dir``: ``report.md``, ``summary.json``,
``success_vs_budget.png`` (every arm, with the exact oracle curves),
``budgetmix_minus_fixed.png`` and ``training_curves.png`` (plots need
matplotlib, the ``plots`` extra).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from budgetmix.evaluation.plots import arm_colour, budget_ticks, pyplot, save_figure

if TYPE_CHECKING:
    from budgetmix.training.experiment.run import ExperimentReport

__all__ = ["PAPER_GAPS", "markdown", "write_report"]

#: The paper's BudgetMix-minus-fixed gains (points of success) at 25/50/75/100% of the ceiling.
PAPER_GAPS = {"25%": 7.5, "50%": 5.3, "75%": 4.0, "100%": 0.0}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return [
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
        *("| " + " | ".join(r) + " |" for r in rows),
        "",
    ]


def _cell(rows: list[dict[str, Any]], arm: str, frac: str, k: int) -> str:
    for r in rows:
        if r["arm"] == arm and r["fraction"] == frac and r["k"] == k:
            return f"{_pct(r['value'])} [{_pct(r['lo'])}, {_pct(r['hi'])}]"
    return "-"


def _arms(report: ExperimentReport) -> list[str]:
    seen: list[str] = []
    for r in report.grid:
        if r["arm"] not in seen:
            seen.append(r["arm"])
    return seen


def _setup(report: ExperimentReport, command: str | None) -> list[str]:
    cfg = report.config
    return [
        "# BudgetMix vs fixed-budget RL on slippery FrozenLake (tiny LM, CPU)",
        "",
        f"Command: `{command}`" if command else f"Preset: `{cfg['preset']}`",
        "",
        f"Map `{'/'.join(cfg['desc'])}`, success_rate {cfg['success_rate']}; ceiling "
        f"**{report.ceiling} turns** (oracle: 90% of the no-limit optimum). Base: "
        f"{cfg['sft_steps']} SFT steps on a budget-blind demonstrator erring "
        f"{cfg['sft_error_rate']:.0%} of the time. RL: {cfg['rl_steps']} GRPO steps x "
        f"{cfg['groups_per_step']} groups x {cfg['group_size']} rollouts per arm and seed, "
        f"lr {cfg['lr']:g}, KL anchor {cfg.get('kl_coef', 0.0):g}, "
        f"{cfg['seeds']} seed(s). Eval: {cfg['eval_episodes']} episodes per cell and seed.",
        "",
    ]


def _success_tables(report: ExperimentReport) -> list[str]:
    """The exact oracle, then pass@1 and every other pass@k by budget, one column per arm."""
    fracs, arms = list(report.budgets), _arms(report)
    lines = ["## Exact oracle (best achievable success, %)", ""]
    lines += _table(
        ["", *(f"{f} (T={report.budgets[f]})" for f in fracs)],
        [
            ["budget-aware optimum", *(_pct(report.oracle["aware"][f]) for f in fracs)],
            [
                "budget-blind demonstrator (noise-free)",
                *(_pct(report.oracle["blind_demonstrator"][f]) for f in fracs),
            ],
        ],
    )
    titles = {1: "## Pass@1 by budget (%, 95% Wilson interval, episodes pooled over seeds)"}
    for k in (1, *(k for k in report.config["pass_ks"] if k > 1)):
        lines += [titles.get(k, f"### Pass@{k} (unbiased estimator; interval over seeds)"), ""]
        lines += _table(
            ["budget", *arms],
            [
                [f"{f} (T={report.budgets[f]})", *(_cell(report.grid, a, f, k) for a in arms)]
                for f in fracs
            ],
        )
    return lines


def _reading(c: dict[str, Any]) -> str:
    if c["lo"] <= 0.0 <= c["hi"]:
        return "within noise"
    return "BudgetMix ahead" if c["diff"] > 0 else "fixed ahead"


def _comparison_table(report: ExperimentReport) -> list[str]:
    if not report.comparison:
        return []
    rows = []
    for c in report.comparison:
        paper = PAPER_GAPS.get(c["fraction"])
        rows.append(
            [
                c.get("arm", "budgetmix"),
                f"{c['fraction']} (T={c['budget']})",
                _pct(c["fixed"]),
                _pct(c["budgetmix"]),
                f"{100 * c['diff']:+.1f} [{100 * c['lo']:+.1f}, {100 * c['hi']:+.1f}]",
                _reading(c),
                "-" if paper is None else f"{paper:+.1f}",
            ]
        )
    return [
        "## BudgetMix minus fixed (points of pass@1, 95% interval)",
        "",
        *_table(
            ["arm", "budget", "fixed", "BudgetMix arm", "difference", "reading", "paper"], rows
        ),
    ]


def _quality_table(diag: dict[str, Any]) -> list[str]:
    lines = [
        "## Step-level action quality (same states, exact finite-horizon Q)",
        "",
        f"{diag['decision_points']} decision points from the base policy's own episodes "
        f"(at the ceiling and at half of it), {diag['after_mistake_points']} of them right "
        "after a mistake (an action losing more than 1 point of success probability, or an "
        "invalid reply). Paper (FrozenLake, RL vs base): better in 42.8% of states, 65.7% "
        "right after a mistake.",
        "",
    ]
    keys = ("a_better", "tie", "b_better")
    return lines + _table(
        ["A vs B", "A better", "tie", "B better", "A better after mistake", "tie", "B better"],
        [
            [pair, *(_pct(q[k]) for k in keys), *(_pct(q[f"{k}_after_mistake"]) for k in keys)]
            for pair, q in diag["action_quality"].items()
        ],
    )


def _recovery_table(report: ExperimentReport) -> list[str]:
    rows = [
        [
            arm,
            str(r["budget"]),
            str(r["injected"]),
            f"{_pct(r['rate'])} [{_pct(r['low'])}, {_pct(r['high'])}]",
            _pct(r["baseline_rate"]),
            _pct(r["oracle_rate"]),
        ]
        for arm, results in report.diagnostics["recovery"].items()
        for r in results
    ]
    return [
        f"## Recovery: an invalid reply forced at turn {report.config['inject_at']}",
        "",
        "Success after the forced mistake (%, Wilson interval), the same episodes without it, "
        "and the best achievable after it (oracle).",
        "",
        *_table(["arm", "T", "episodes", "recovered", "without injection", "oracle"], rows),
    ]


def _training_table(report: ExperimentReport) -> list[str]:
    rows = [
        [
            arm,
            str(i),
            str(t["steps"]),
            str(t["rollouts"]),
            str(t["sampled_tokens"]),
            _pct(t["final_success"]),
        ]
        for arm, runs in report.training.items()
        for i, t in enumerate(runs)
    ]
    head = ["arm", "seed", "RL steps", "rollouts", "sampled tokens", "train success (last 20%)"]
    return ["## Training (same rollouts and updates per arm)", "", *_table(head, rows)]


def _closing(report: ExperimentReport) -> list[str]:
    return [
        "## Timings (s)",
        "",
        ", ".join(f"{k} {v:.0f}" for k, v in report.timings.items()),
        "",
        f"Best checkpoint (mean success up to the ceiling): `{report.best_checkpoint}`",
        "",
        "![success vs budget](success_vs_budget.png)",
        "![BudgetMix minus fixed](budgetmix_minus_fixed.png)",
        "![training curves](training_curves.png)",
        "",
    ]


def markdown(report: ExperimentReport, *, command: str | None = None) -> str:
    """The report as markdown (success in percent, 95% intervals in brackets)."""
    sections = (
        _setup(report, command),
        _success_tables(report),
        _comparison_table(report),
        _quality_table(report.diagnostics),
        _recovery_table(report),
        _training_table(report),
        _closing(report),
    )
    return "\n".join(line for section in sections for line in section)


def _success_plot(plt: Any, report: ExperimentReport, path: Path) -> Path:
    fracs = list(report.budgets)
    xs = [report.budgets[f] for f in fracs]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for arm in _arms(report):
        rows = [r for r in report.grid if r["arm"] == arm and r["k"] == 1]
        rows.sort(key=lambda r: r["budget"])
        ax.errorbar(
            [r["budget"] for r in rows],
            [r["value"] for r in rows],
            yerr=[[r["value"] - r["lo"] for r in rows], [r["hi"] - r["value"] for r in rows]],
            marker="o",
            capsize=3,
            label=arm,
            color=arm_colour(arm),
        )
    ax.plot(xs, [report.oracle["aware"][f] for f in fracs], "k--", label="oracle (aware)")
    ax.plot(
        xs,
        [report.oracle["blind_demonstrator"][f] for f in fracs],
        "k:",
        label="blind demonstrator",
    )
    ax.axvline(report.ceiling, color="grey", lw=0.8)
    budget_ticks(ax, sorted(set(xs)))
    ax.set_xlabel("turn budget T (vertical line: ceiling)")
    ax.set_ylabel("success (pass@1)")
    ax.set_ylim(0, 1)
    ax.set_title(f"Success vs budget per arm (ceiling T={report.ceiling})")
    ax.legend(fontsize=8)
    return save_figure(fig, plt, path)


def _difference_plot(plt: Any, report: ExperimentReport, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    arms = list(dict.fromkeys(c.get("arm", "budgetmix") for c in report.comparison))
    width = 0.8 / len(arms)
    for j, arm in enumerate(arms):
        rows = [c for c in report.comparison if c.get("arm", "budgetmix") == arm]
        xs_bar = [i + (j - (len(arms) - 1) / 2) * width for i in range(len(rows))]
        diffs = [100 * c["diff"] for c in rows]
        err = [
            [100 * (c["diff"] - c["lo"]) for c in rows],
            [100 * (c["hi"] - c["diff"]) for c in rows],
        ]
        ax.bar(
            xs_bar,
            diffs,
            width=width,
            yerr=err,
            capsize=3,
            label=f"{arm} - fixed",
            color=arm_colour(arm),
        )
    first = [c for c in report.comparison if c.get("arm", "budgetmix") == arms[0]]
    ax.set_xticks(range(len(first)))
    ax.set_xticklabels([f"{c['fraction']}\nT={c['budget']}" for c in first])
    paper = [PAPER_GAPS.get(c["fraction"]) for c in first]
    px = [i for i, p in enumerate(paper) if p is not None]
    ax.scatter(px, [paper[i] for i in px], color="tab:red", marker="D", label="paper", zorder=3)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_ylabel("points of pass@1")
    ax.set_title("BudgetMix minus fixed (pass@1 points, 95% interval) by budget")
    ax.legend(fontsize=8)
    return save_figure(fig, plt, path)


def _training_plot(plt: Any, report: ExperimentReport, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6.0, 3.6))
    styles = ("-", "--", ":", "-.")
    for arm, runs in report.training.items():
        color = arm_colour(arm)  # one colour per arm, one line style per seed: 12+ curves legible
        for i, t in enumerate(runs):
            ys = t["success_curve"]
            w = max(1, len(ys) // 10)
            smooth = [
                sum(ys[max(0, j - w + 1) : j + 1]) / len(ys[max(0, j - w + 1) : j + 1])
                for j in range(len(ys))
            ]
            style = styles[i % len(styles)]
            ax.plot(range(len(ys)), smooth, color=color, ls=style, label=f"{arm} s{i}")
    ax.set_xlabel("RL step")
    ax.set_ylabel("training success (own budget draws)")
    ax.set_title("Training success per arm and seed (smoothed)")
    ax.legend(fontsize=7)
    return save_figure(fig, plt, path)


def _plots(report: ExperimentReport, out: Path) -> dict[str, Path]:
    plt = pyplot()
    files = {"success_vs_budget": _success_plot(plt, report, out / "success_vs_budget.png")}
    if report.comparison:
        files["budgetmix_minus_fixed"] = _difference_plot(
            plt, report, out / "budgetmix_minus_fixed.png"
        )
    files["training_curves"] = _training_plot(plt, report, out / "training_curves.png")
    return files


def write_report(report: ExperimentReport, *, command: str | None = None) -> dict[str, Path]:
    """Write ``report.md``, ``summary.json`` and the plots; returns their paths by name.

    Raises:
        MissingExtraError: matplotlib is not installed.
    """
    out = report.out_dir
    out.mkdir(parents=True, exist_ok=True)
    files = _plots(report, out)
    summary = out / "summary.json"
    summary.write_text(json.dumps(report.to_dict(), indent=2, sort_keys=True) + "\n")
    md = out / "report.md"
    md.write_text(markdown(report, command=command))
    return {"report": md, "summary": summary, **files}
