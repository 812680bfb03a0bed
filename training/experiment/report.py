"""Writes an experiment report (:mod:`budgetmix.training.experiment`) as markdown, PNGs, JSON.

Files in the report's ``out_dir``: ``report.md``, ``summary.json``,
``success_vs_budget.png`` (every arm, with the exact oracle curves),
``budget_sensitivity.png`` (P(flip move) at the start state vs turns left, per arm and seed),
``budgetmix_minus_fixed.png`` and ``training_curves.png`` (plots need
matplotlib, the ``plots`` extra).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from budgetmix.evaluation.plots import (
    arm_colour,
    budget_ticks,
    distinct_colours,
    pyplot,
    save_figure,
)

if TYPE_CHECKING:
    from budgetmix.training.experiment.run import ExperimentReport

__all__ = ["PAPER_GAPS", "markdown", "write_report"]

#: The paper's BudgetMix-minus-fixed gains (points of success) at 25/50/75/100% of the ceiling.
PAPER_GAPS = {"25%": 7.5, "50%": 5.3, "75%": 4.0, "100%": 0.0}


def _guess_note(share: float) -> str:
    """The base's exploration share, when its demonstrator guesses whatever the budget."""
    return f", guessing at {share:.0%} of its turns whatever the budget" if share else ""


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


def _environment(report: ExperimentReport) -> dict[str, Any]:
    """The environment's facts; a report without them (older runs) is FrozenLake's."""
    env: dict[str, Any] = getattr(report, "environment", None) or {}
    return {
        "name": "frozenlake-compact",
        "decision": "go right with 4-9 turns left, wait with 10+",
        "state_name": "start cell",
        **env,
    }


def _setup(report: ExperimentReport, command: str | None) -> list[str]:
    cfg = report.config
    env = _environment(report)
    if env["name"] == "frozenlake-compact":
        title = "slippery FrozenLake"
        where = f"Map `{'/'.join(cfg['desc'])}`, success_rate {cfg['success_rate']}"
    else:
        title, where = f"`{env['name']}`", f"Environment `{env['name']}` ({env.get('label', '')})"
    return [
        f"# BudgetMix vs fixed-budget RL on {title} (tiny LM, CPU)",
        "",
        f"Command: `{command}`" if command else f"Preset: `{cfg['preset']}`",
        "",
        f"{where}; ceiling "
        f"**{report.ceiling} turns** (oracle: 90% of the no-limit optimum). Base: "
        f"{cfg['sft_steps']} SFT steps on a budget-"
        f"{'aware' if cfg.get('demo_budget_aware') else 'blind'} demonstrator erring "
        f"{cfg['sft_error_rate']:.0%} of the time"
        f"{' (errors executed, not learned)' if cfg.get('sft_labels') == 'optimal' else ''}"
        f"{_guess_note(cfg.get('sft_guess_share', 0.0))}"
        ". RL: GRPO groups of "
        f"{cfg['groups_per_step']} x {cfg['group_size']} rollouts until "
        f"{cfg.get('token_budget')} sampled tokens per run (cap {cfg['rl_steps']} steps), "
        f"lr {cfg['lr']:g} (warmup {cfg.get('warmup_steps', 0)}, linear decay), KL to the "
        f"base {cfg.get('kl_coef', 0.0):g}, zero-variance sets skipped; {cfg['seeds']} "
        f"training seed(s) per arm. Eval: final checkpoints, {cfg['eval_episodes']} shared "
        "episodes per cell and seed. Design: docs/prereg.md.",
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
    titles = {1: "## Pass@1 by budget (%, mean over training seeds, 95% t-interval over seeds)"}
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
    """``A ahead`` / ``B ahead`` only where the Holm-corrected p is below 0.05."""
    p = c.get("p_holm")
    if p is None or not p < 0.05:
        return "within noise (Holm)"
    a, b = c.get("arm", "budgetmix"), c.get("versus", "fixed")
    return f"{a} ahead" if c["diff"] > 0 else f"{b} ahead"


def _interval(c: dict[str, Any], key: str = "mean") -> str:
    return f"{100 * c[key]:+.1f} [{100 * c['lo']:+.1f}, {100 * c['hi']:+.1f}]"


def _primary_section(report: ExperimentReport) -> list[str]:
    stats = report.stats
    lines = ["## Preregistered endpoints (training seed = unit; docs/prereg.md)", ""]
    rows = [
        [
            f"{c['arm']} - {c['versus']}" + (" (**primary**)" if i == 0 else ""),
            str(c["n"]),
            _interval(c),
            f"{c['p']:.3f}",
            " ".join(f"{100 * v:+.1f}" for v in c["values"]),
        ]
        for i, c in enumerate(stats.get("contrasts", []))
    ]
    lines += _table(["mean over 25-75% cells", "seeds", "points [95% t]", "p", "per seed"], rows)
    collapses = stats.get("collapses", {})
    lines += [
        "Collapsed runs (kept in every number): "
        + ", ".join(f"{a} {c['collapsed']}/{c['runs']}" for a, c in collapses.items()),
        "",
    ]
    pick = stats.get("validation")
    if pick:
        lines += [
            f"Deployment pick (validation seeds, not the evaluation grid): {pick['arm']} seed "
            f"{pick['seed']}, validation success {_pct(pick['validation_success'])}%.",
            "",
        ]
    return lines


def _comparison_table(report: ExperimentReport) -> list[str]:
    if not report.comparison:
        return []
    rows = []
    for c in report.comparison:
        paper = PAPER_GAPS.get(c["fraction"]) if c.get("versus") == "fixed" else None
        rows.append(
            [
                f"{c['arm']} - {c.get('versus', 'fixed')}",
                f"{c['fraction']} (T={c['budget']})",
                _pct(c["fixed"]),
                _pct(c["budgetmix"]),
                _interval(c, "diff"),
                f"{c.get('p_holm', float('nan')):.3f}",
                _reading(c),
                "-" if paper is None else f"{paper:+.1f}",
            ]
        )
    head = ["pair A - B", "budget", "B", "A", "A - B [95% t]", "Holm p", "reading", "paper"]
    return ["## Per-budget cells (paired per-seed differences, points)", "", *_table(head, rows)]


def _s_text(s: dict[str, Any]) -> str:
    """Mean S with its t-interval over seeds; one model (the base): its interval over episodes."""
    seeds = s.get("per_seed") or []
    if len(seeds) == 1 and "low" in seeds[0]:
        r = seeds[0]
        return f"{s['mean']:+.2f} [{r['low']:+.2f}, {r['high']:+.2f}] (one model, over episodes)"
    return f"{s['mean']:+.2f} [{s['lo']:+.2f}, {s['hi']:+.2f}]"


def _sensitivity_section(diag: dict[str, Any], where: str = "start cell") -> list[str]:
    sens = diag.get("sensitivity") or {}
    if not sens:
        return [f"## Budget sensitivity: the {where} does not depend on the budget here", ""]
    first = next(iter(sens.values()))
    lines = [
        f"## Budget sensitivity at the {where}",
        "",
        f"P({first['flip_action']} | k turns left) averaged over k in "
        f"{min(first['optimal_budgets'])}-{max(first['optimal_budgets'])} (where it is the "
        "optimum) minus over the other informative k; oracle 1, a budget-blind policy 0. "
        "Success criterion (prereg): BudgetMix >= 0.5 and the masked control not capturing "
        "the gain.",
        "",
    ]
    rows = [
        [
            arm,
            _s_text(s),
            " ".join(f"{r['sensitivity']:+.2f}" for r in s["per_seed"]),
            " ".join(f"{f:.2f}" for f in s["noise_floors"]),
        ]
        for arm, s in sens.items()
    ]
    return lines + _table(["arm", "mean [95% t]", "per seed", "noise floor per seed"], rows)


def _quality_table(diag: dict[str, Any]) -> list[str]:
    quality = diag["action_quality"]
    first: dict[str, Any] = next(iter(quality.values()), {})
    lines = [
        "## Step-level action quality (expected exact Q, non-tied states)",
        "",
        f"{diag['decision_points']} decision points from the base policy's own episodes "
        f"(at the ceiling and at half of it), {first.get('non_tied', '-')} of them non-tied; "
        f"{diag['after_mistake_points']} right after a mistake (a step losing more than 1 "
        f"point of success probability). {first.get('samples', '-')} draws per point and "
        "policy; the noise floor is the same comparison between two sample sets of one "
        "policy. Paper (RL vs base): better in 42.8% of states, 65.7% after a mistake.",
        "",
    ]
    keys = ("a_better", "tie", "b_better")
    return lines + _table(
        ["A vs B", "A better", "tie", "B better", "noise floor", "A better after mistake"],
        [
            [
                pair,
                *(_pct(q[k]) for k in keys),
                _pct(q["noise_floor"]),
                _pct(q["a_better_after_mistake"]),
            ]
            for pair, q in quality.items()
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
            f"{t.get('zero_variance_sets', 0)}/{t.get('baseline_sets', 0)}",
            _pct(t["final_success"]),
        ]
        for arm, runs in report.training.items()
        for i, t in enumerate(runs)
    ]
    head = ["arm", "seed", "RL steps", "rollouts", "sampled tokens", "zero-variance sets",
            "train success (last 20%)"]  # fmt: skip
    return ["## Training (the same sampled-token budget per run)", "", *_table(head, rows)]


def _closing(report: ExperimentReport) -> list[str]:
    return [
        "## Timings (s)",
        "",
        ", ".join(f"{k} {v:.0f}" for k, v in report.timings.items()),
        "",
        f"Deployment checkpoint (picked on validation seeds): `{report.best_checkpoint}`",
        "",
        "![budget sensitivity](budget_sensitivity.png)",
        "![success vs budget](success_vs_budget.png)",
        "![BudgetMix minus fixed](budgetmix_minus_fixed.png)",
        "![training curves](training_curves.png)",
        "",
    ]


def markdown(report: ExperimentReport, *, command: str | None = None) -> str:
    """The report as markdown (success in percent, 95% intervals in brackets)."""
    sections = (
        _setup(report, command),
        _primary_section(report),
        _sensitivity_section(report.diagnostics, _environment(report)["state_name"]),
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

    def pair(c: dict[str, Any]) -> str:
        return f"{c.get('arm', 'budgetmix')} - {c.get('versus', 'fixed')}"

    arms = list(dict.fromkeys(pair(c) for c in report.comparison))
    # each pair in its arm's colour; a second pair of one arm gets a colour of its own
    colours = distinct_colours([arm.split(" - ")[0] for arm in arms])
    width = 0.8 / len(arms)
    for j, arm in enumerate(arms):
        rows = [c for c in report.comparison if pair(c) == arm]
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
            label=arm,
            color=colours[j],
        )
    first = [c for c in report.comparison if pair(c) == arms[0]]
    ax.set_xticks(range(len(first)))
    ax.set_xticklabels([f"{c['fraction']}\nT={c['budget']}" for c in first])
    paper = [PAPER_GAPS.get(c["fraction"]) for c in first]
    px = [i for i, p in enumerate(paper) if p is not None]
    ax.scatter(px, [paper[i] for i in px], color="tab:red", marker="D", label="paper", zorder=3)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_ylabel("points of pass@1")
    ax.set_title("Paired per-seed differences (pass@1 points, 95% t-interval)")
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


def _sensitivity_plot(plt: Any, report: ExperimentReport, path: Path) -> Path:
    from matplotlib.ticker import MaxNLocator

    sens = report.diagnostics.get("sensitivity") or {}
    env = _environment(report)
    fig, ax = plt.subplots(figsize=(8.4, 3.8))
    for arm, s in sens.items():
        ax.plot(s["turns_left"], s["p_flip"], marker="o", ms=3, color=arm_colour(arm),
                label=f"{arm}: S={_s_text(s)}")  # fmt: skip
        for r in s["per_seed"]:
            ax.plot(s["turns_left"], r["p_flip"], color=arm_colour(arm), lw=0.5, alpha=0.35)
    if sens:
        first = next(iter(sens.values()))
        opt = set(first["optimal_budgets"])
        oracle = [1.0 if k in opt else 0.0 for k in first["turns_left"]]
        ax.step(first["turns_left"], oracle, "k--", where="mid", label="oracle (best move)")
        ax.set_ylabel(f"P({first['flip_action']!r}) at the {env['state_name']}")
    ax.set_xlabel("turns left (first turn of an episode with budget T)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # turns are whole numbers
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"Budget sensitivity: {env['decision']}")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the data
    return save_figure(fig, plt, path)


def _plots(report: ExperimentReport, out: Path) -> dict[str, Path]:
    plt = pyplot()
    files = {"success_vs_budget": _success_plot(plt, report, out / "success_vs_budget.png")}
    if report.diagnostics.get("sensitivity"):
        files["budget_sensitivity"] = _sensitivity_plot(plt, report, out / "budget_sensitivity.png")
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
