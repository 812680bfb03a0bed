"""Pooling helpers of the experiment: per-seed diagnostics and training logs into report rows."""

from __future__ import annotations

from typing import Any

from budgetmix.evaluation.passk import wilson_interval

__all__ = ["pool_comparisons", "pool_recovery", "train_summary"]


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
