"""The experiment's numbers: episode traces, per-seed diagnostics and training logs into rows.

Pure functions over what :mod:`.run` measured (no model, no environment):
the Pass@(K,T) grid, BudgetMix-minus-fixed differences, success curves, the
best checkpoint, and per-seed results pooled.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from budgetmix.evaluation.passk import TaskCounts, pass_at_k_summary, wilson_interval
from budgetmix.training.diagnostics import EpisodeTrace

__all__ = [
    "ArmTraces",
    "best_checkpoint",
    "comparison_rows",
    "grid_rows",
    "pool_comparisons",
    "pool_recovery",
    "success_curves",
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
    """Pass@k rows of one arm per budget: the unbiased estimate, pass@1 with a pooled interval."""
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
            if k == 1:  # episodes pooled over seeds: a Wilson interval of the success rate
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


def _difference(a: list[EpisodeTrace], b: list[EpisodeTrace]) -> tuple[float, float, float]:
    """``rate(b) - rate(a)`` with a 95% normal interval (episodes as independent draws)."""
    pa, pb = _rate(a), _rate(b)
    se = (pa * (1 - pa) / len(a) + pb * (1 - pb) / len(b)) ** 0.5
    return pb - pa, pb - pa - 1.96 * se, pb - pa + 1.96 * se


def comparison_rows(budgets: dict[str, int], traces: ArmTraces) -> list[dict[str, Any]]:
    """Every BudgetMix arm minus fixed, per budget (pooled pass@1, normal 95% interval)."""
    if "fixed" not in traces:
        return []
    rows = []
    for arm in (a for a in traces if a.startswith("budgetmix")):
        for frac, t in budgets.items():
            a = [tr for r in traces["fixed"] for tr in r[t]]
            b = [tr for r in traces[arm] for tr in r[t]]
            diff, lo, hi = _difference(a, b)
            rows.append(
                {
                    "arm": arm,
                    "fraction": frac,
                    "budget": t,
                    "fixed": _rate(a),
                    "budgetmix": _rate(b),
                    "diff": diff,
                    "lo": lo,
                    "hi": hi,
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
    arms: dict[str, list[Path]], traces: ArmTraces, budgets: dict[str, int], ceiling: int
) -> Path:
    """The RL checkpoint with the highest mean success over the budgets up to the ceiling."""
    inside = [t for t in budgets.values() if t <= ceiling]
    best, best_score = arms["base"][0], -1.0
    for arm, paths in arms.items():
        if arm == "base":
            continue
        for path, r in zip(paths, traces[arm], strict=True):
            score = sum(_rate(r[t]) for t in inside) / len(inside)
            if score > best_score:
                best, best_score = path, score
    return best


def train_summary(metrics: list[dict[str, Any]]) -> dict[str, Any]:
    """Steps, rollouts, sampled tokens and the success curve of one RL run's metrics."""
    rl = [m for m in metrics if m.get("phase") == "rl"]
    tail = rl[-max(1, len(rl) // 5) :]
    return {
        "steps": len(rl),
        "rollouts": int(sum(m.get("n", 0) for m in rl)),
        "sampled_tokens": int(sum(m.get("sampled_tokens", 0) for m in rl)),
        "success_curve": [round(float(m.get("success", 0.0)), 4) for m in rl],
        "final_success": sum(float(m.get("success", 0.0)) for m in tail) / len(tail)
        if tail
        else 0.0,
    }


def pool_comparisons(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Pool per-seed comparisons (same points, so shares average with equal weights)."""
    out: dict[str, Any] = {"n": rows[0]["n"], "n_after_mistake": rows[0]["n_after_mistake"]}
    for key in (
        "a_better",
        "tie",
        "b_better",
        "a_better_after_mistake",
        "tie_after_mistake",
        "b_better_after_mistake",
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
