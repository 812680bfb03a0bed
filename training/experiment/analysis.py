"""The experiment's numbers: episode traces, per-seed diagnostics and training logs into rows.

Pure functions over what :mod:`.run` measured (no model, no environment): the
Pass@(K,T) grid, the preregistered seed-level statistics (paired per-seed
differences, the primary endpoint over 25-75% of the ceiling, Holm-corrected
cells), collapses, budget sensitivity per arm, the deployment pick on
validation episodes, and per-seed diagnostics pooled.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from budgetmix.evaluation.passk import TaskCounts, pass_at_k_summary, wilson_interval
from budgetmix.training.diagnostics.episodes import EpisodeTrace
from budgetmix.training.diagnostics.stats import holm, mean_test

__all__ = [
    "ArmTraces",
    "best_checkpoint",
    "collapsed",
    "grid_rows",
    "outcome_strings",
    "pool_comparisons",
    "pool_recovery",
    "seed_statistics",
    "sensitivity_summary",
    "success_curves",
    "success_table",
    "train_summary",
]

#: Per arm, per seed: the episodes played at each budget.
ArmTraces = dict[str, list[dict[int, list[EpisodeTrace]]]]


def _rate(traces: list[EpisodeTrace]) -> float:
    return sum(t.success for t in traces) / len(traces)


def grid_rows(
    arm: str,
    runs: list[dict[int, list[EpisodeTrace]]],
    budgets: dict[str, int],
    ks: tuple[int, ...],
) -> list[dict[str, Any]]:
    """Pass@k rows of one arm per budget: the unbiased estimate; pass@1 with a t-interval over
    training seeds (a Wilson interval for a single run)."""
    rows = []
    for frac, t in budgets.items():
        counts = [
            TaskCounts(f"seed{i}", len(r[t]), sum(tr.success for tr in r[t]))
            for i, r in enumerate(runs)
        ]
        summary = pass_at_k_summary(counts, max(ks))
        wins, n = sum(c.c for c in counts), sum(c.n for c in counts)
        for k in ks:
            est = summary.overall[k - 1]
            lo, hi = (est.lo, est.hi)
            if k == 1 and len(counts) > 1:  # the training seed is the unit: a t-interval
                seed_test = mean_test([c.c / c.n for c in counts])
                lo, hi = max(0.0, seed_test.lo), min(1.0, seed_test.hi)
            elif k == 1:  # one run (the base): a Wilson interval over its episodes
                lo, hi = wilson_interval(wins, n)
            rows.append(
                {
                    "arm": arm,
                    "fraction": frac,
                    "budget": t,
                    "k": k,
                    "value": est.value,
                    "lo": lo,
                    "hi": hi,
                    "episodes": n,
                    "successes": wins,
                    "per_seed": [summary.per_task[c.task_id][k - 1].value for c in counts],
                }
            )
    return rows


def success_curves(budgets: dict[str, int], traces: ArmTraces) -> dict[str, list[dict[str, Any]]]:
    """Per arm, the success rate at each budget (episodes pooled over seeds)."""
    return {
        arm: [
            {
                "fraction": frac,
                "budget": t,
                "rate": sum(sum(x.success for x in r[t]) for r in runs)
                / sum(len(r[t]) for r in runs),
            }
            for frac, t in budgets.items()
        ]
        for arm, runs in traces.items()
    }


def best_checkpoint(
    arms: dict[str, list[Path]], validation: ArmTraces
) -> tuple[Path, dict[str, Any]]:
    """The deployment pick: the BudgetMix run (not the masked control) with the highest mean
    validation success.

    ``validation`` holds episodes on seeds disjoint from the evaluation grid, so the
    pick never sees the numbers it is judged by. Falls back to any RL arm, then the base.
    """
    # the masked control is not deployable: a controller shows real numbers
    candidates = [a for a in validation if a.startswith("budgetmix") and "masked" not in a] or list(
        validation
    )
    best, best_score, where = arms["base"][0], -1.0, {"arm": "base", "seed": 0}
    for arm in candidates:
        for i, (path, r) in enumerate(zip(arms[arm], validation[arm], strict=True)):
            score = sum(_rate(v) for v in r.values()) / len(r)
            if score > best_score:
                best, best_score, where = path, score, {"arm": arm, "seed": i}
    return best, {**where, "validation_success": best_score, "path": str(best)}


def train_summary(metrics: list[dict[str, Any]]) -> dict[str, Any]:
    """Steps, rollouts, sampled tokens, zero-variance sets and the success curve of one RL run."""
    rl = [m for m in metrics if m.get("phase") == "rl"]
    tail = rl[-max(1, len(rl) // 5) :]
    late = sum(int(m.get("n", 0)) for m in tail)
    length = sum(int(m.get("terminations", {}).get("length", 0)) for m in tail)
    return {
        "steps": len(rl),
        "rollouts": int(sum(m.get("n", 0) for m in rl)),
        "sampled_tokens": int(sum(m.get("sampled_tokens", 0) for m in rl)),
        "zero_variance_sets": int(sum(m.get("zero_variance_sets", 0) for m in rl)),
        "baseline_sets": int(sum(m.get("baseline_sets", 0) for m in rl)),
        "skipped_updates": int(sum(m.get("skipped_update", 0) for m in rl)),
        "final_kl": float(rl[-1].get("kl", 0.0)) if rl else 0.0,
        "success_curve": [round(float(m.get("success", 0.0)), 4) for m in rl],
        "final_success": sum(float(m.get("success", 0.0)) for m in tail) / len(tail)
        if tail
        else 0.0,
        "late_length_share": length / late if late else 0.0,
    }


def pool_comparisons(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Pool per-seed expected-Q comparisons (same points: shares average with equal weights)."""
    out: dict[str, Any] = {k: rows[0][k] for k in ("points", "non_tied", "samples")}
    out["n_after_mistake"] = rows[0]["n_after_mistake"]
    for key in (
        "a_better",
        "tie",
        "b_better",
        "a_better_after_mistake",
        "tie_after_mistake",
        "b_better_after_mistake",
        "noise_floor",
        "mean_q_a",
        "mean_q_b",
    ):
        vals = [r[key] for r in rows if r[key] is not None]
        out[key] = sum(vals) / len(vals) if vals else None
    out["per_seed"] = rows
    return out


def pool_recovery(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Pool per-seed recovery results (counts summed, rates weighted by episodes)."""
    injected = sum(r["injected"] for r in rows)
    recovered = sum(r["recovered"] for r in rows)
    lo, hi = wilson_interval(recovered, injected) if injected else (0.0, 1.0)
    weights = [r["injected"] for r in rows]

    def avg(key: str) -> float | None:
        vals = [(r[key], w) for r, w in zip(rows, weights, strict=True) if r[key] is not None and w]
        return sum(v * w for v, w in vals) / sum(w for _, w in vals) if vals else None

    return {
        "budget": rows[0]["budget"],
        "inject_at": rows[0]["inject_at"],
        "injected": injected,
        "recovered": recovered,
        "rate": recovered / injected if injected else 0.0,
        "low": lo,
        "high": hi,
        "baseline_rate": avg("baseline_rate"),
        "oracle_rate": avg("oracle_rate"),
    }


#: The primary endpoint averages these cells (docs/prereg.md).
PRIMARY_FRACTIONS: tuple[str, ...] = ("25%", "50%", "75%")
#: Pairs compared (A minus B), the first is the primary one.
PAIRS: tuple[tuple[str, str], ...] = (
    ("budgetmix", "fixed"),
    ("budgetmix", "budgetmix-masked"),
    ("budgetmix-masked", "fixed"),
)


def _per_seed(runs: list[dict[int, list[EpisodeTrace]]], t: int) -> list[float]:
    return [_rate(r[t]) for r in runs]


def paired_cells(
    budgets: dict[str, int], traces: ArmTraces, a: str, b: str
) -> list[dict[str, Any]]:
    """Per budget, the mean paired per-seed difference ``a - b`` (t-interval, Holm p)."""
    n = min(len(traces[a]), len(traces[b]))
    rows: list[dict[str, Any]] = []
    for frac, t in budgets.items():
        pa, pb = _per_seed(traces[a][:n], t), _per_seed(traces[b][:n], t)
        test = mean_test([x - y for x, y in zip(pa, pb, strict=True)])
        rows.append(
            {
                "arm": a,
                "versus": b,
                "fraction": frac,
                "budget": t,
                "fixed": sum(pb) / n,
                "budgetmix": sum(pa) / n,
                "diff": test.mean,
                "lo": test.lo,
                "hi": test.hi,
                "p": test.p,
                "per_seed": list(test.values),
            }
        )
    for row, adj in zip(rows, holm([float(r["p"]) for r in rows]), strict=True):
        row["p_holm"] = adj
    return rows


def window_difference(budgets: dict[str, int], traces: ArmTraces, a: str, b: str) -> dict[str, Any]:
    """The primary-endpoint statistic for ``a - b``: per seed, the mean over the 25-75% cells."""
    cells = [budgets[f] for f in PRIMARY_FRACTIONS if f in budgets]
    n = min(len(traces[a]), len(traces[b]))
    per_seed = [
        sum(_rate(traces[a][s][t]) - _rate(traces[b][s][t]) for t in cells) / len(cells)
        for s in range(n)
    ]
    return {"arm": a, "versus": b, "cells": cells, **mean_test(per_seed).to_dict()}


def collapsed(metrics_summary: dict[str, Any]) -> bool:
    """The prereg's collapse rule on one run's training summary (see :func:`train_summary`)."""
    curve = metrics_summary["success_curve"]
    if len(curve) < 5:
        return False
    fifth = max(1, len(curve) // 5)
    first, last = sum(curve[:fifth]) / fifth, sum(curve[-fifth:]) / fifth
    return bool(last < 0.5 * first or metrics_summary.get("late_length_share", 0.0) >= 0.5)


def seed_statistics(
    budgets: dict[str, int], traces: ArmTraces, training: dict[str, Any], methods: Any
) -> dict[str, Any]:
    """Primary endpoint, every pair's window difference and cells, collapses per arm."""
    pairs = [(a, b) for a, b in PAIRS if a in traces and b in traces]
    contrasts = [window_difference(budgets, traces, a, b) for a, b in pairs]
    comparison = [row for a, b in pairs for row in paired_cells(budgets, traces, a, b)]
    collapses = {
        arm: {"runs": len(runs), "collapsed": sum(collapsed(r) for r in runs)}
        for arm, runs in training.items()
    }
    primary = contrasts[0] if contrasts and pairs[0] == PAIRS[0] else None
    return {
        "primary": primary,
        "contrasts": contrasts,
        "comparison": comparison,
        "collapses": collapses,
    }


def sensitivity_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One arm's start-cell sensitivity over seeds: mean with a t-interval, per-seed rows."""
    test = mean_test([r["sensitivity"] for r in rows])
    turns = [c["turns_left"] for c in rows[0]["cells"]]
    flip = rows[0]["flip_action"]
    curve = [
        sum(r["cells"][i]["probabilities"][flip] for r in rows) / len(rows)
        for i in range(len(turns))
    ]
    return {
        "flip_action": flip,
        "optimal_budgets": rows[0]["optimal_budgets"],
        **test.to_dict(),
        "noise_floors": [r["noise_floor"] for r in rows],
        "turns_left": turns,
        "p_flip": curve,
        "per_seed": [
            {k: r[k] for k in ("sensitivity", "low", "high", "noise_floor", "share_optimal")}
            | {"p_flip": [c["probabilities"][flip] for c in r["cells"]]}
            for r in rows
        ],
    }


def outcome_strings(budgets: dict[str, int], traces: ArmTraces) -> dict[str, list[dict[str, str]]]:
    """Arm -> per seed -> fraction -> ``"0110..."``: each evaluation episode's success, in order."""
    return {
        arm: [
            {f: "".join("1" if tr.success else "0" for tr in run[t]) for f, t in budgets.items()}
            for run in runs
        ]
        for arm, runs in traces.items()
    }


def success_table(outcomes: dict[str, list[dict[str, str]]]) -> dict[str, dict[str, list[float]]]:
    """Arm -> fraction -> per-seed pass@1 from :func:`outcome_strings` (``summary.json``)."""
    table: dict[str, dict[str, list[float]]] = {}
    for arm, runs in outcomes.items():
        for run in runs:
            for frac, bits in run.items():
                table.setdefault(arm, {}).setdefault(frac, []).append(bits.count("1") / len(bits))
    return table
