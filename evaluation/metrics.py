"""Per-cell aggregates of a grid: pass@k, failure breakdown, recovery and cost.

A *cell* is one budget T (all tasks, all samples). :func:`summarize` returns a
JSON-serialisable dict (the ``summary.json`` of a report):

* ``pass_at_k``: overall pass@k for ``k = 1..K`` with intervals (:mod:`.passk`),
  ``per_task`` the same per task; K is the smallest sample count of any task.
* ``failures``: counts per :data:`~.failures.FAILURE_CATEGORIES` category.
* ``recovery``: ``mistake_rate`` (mistakes per model call), ``episodes_with_mistakes``,
  ``recovery_rate`` (recovered mistakes / mistakes), ``turns_to_recover``
  (mean, median), ``recovered_in_budget`` (share of episodes with a mistake in
  which every mistake was followed by a good step before the episode ended),
  ``success_after_mistake``; with fault injection, ``fault``: episodes that
  reached the fault step, share recovered, share solved, turns to recover and
  the budget left at the fault (``T - s``).
* ``cost``: means per episode of model calls, env calls, tool calls, tokens,
  USD, turns; latency p50/p95/p99 (linear interpolation); exhaustion rate.

``frontier`` trades breadth against depth: every (k, T) is a point with cost
``k x mean cost of one attempt at T`` and success ``pass@k(T)``; ``pareto`` keeps
the points no other point beats on both. :func:`success_at_cost` and
:func:`cost_at_success` read it. The cost metric is USD when any episode had a
cost, else tokens when any had tokens, else model calls.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from budgetmix.evaluation.failures import FAILURE_CATEGORIES
from budgetmix.evaluation.passk import PassKSummary, TaskCounts, pass_at_k_summary
from budgetmix.evaluation.results import EpisodeRecord
from budgetmix.exceptions import ConfigError

__all__ = ["cost_at_success", "percentile", "success_at_cost", "summarize"]


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) with linear interpolation.

    Raises:
        ConfigError: no values, or ``q`` outside [0, 100].
    """
    if not values:
        raise ConfigError("percentile of no values")
    if not 0.0 <= q <= 100.0:
        raise ConfigError(f"q must lie in [0, 100], got {q}")
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _cost_metric(records: Sequence[EpisodeRecord]) -> str:
    if any(r.cost_usd > 0 for r in records):
        return "cost_usd"
    if any(r.input_tokens or r.output_tokens for r in records):
        return "tokens"
    return "model_calls"


def _cost_of(r: EpisodeRecord, metric: str) -> float:
    if metric == "cost_usd":
        return r.cost_usd
    if metric == "tokens":
        return float(r.input_tokens + r.output_tokens)
    return float(r.model_calls)


def _share(rows: Sequence[EpisodeRecord], keep: Callable[[EpisodeRecord], bool]) -> float | None:
    """The share of ``rows`` that ``keep`` holds for (``None`` for no rows)."""
    return sum(1 for r in rows if keep(r)) / len(rows) if rows else None


def _recovery(rs: Sequence[EpisodeRecord]) -> dict[str, Any]:
    calls = sum(r.model_calls for r in rs)
    mistakes = sum(r.mistakes for r in rs)
    with_m = [r for r in rs if r.mistakes]
    ttr = [float(t) for r in rs for t in r.turns_to_recover]
    out: dict[str, Any] = {
        "mistakes": mistakes,
        "mistake_rate": mistakes / calls if calls else 0.0,
        "episodes_with_mistakes": len(with_m) / len(rs),
        "recovery_rate": (sum(r.recovered_mistakes for r in rs) / mistakes) if mistakes else None,
        "turns_to_recover_mean": _mean(ttr),
        "turns_to_recover_median": statistics.median(ttr) if ttr else None,
        "recovered_in_budget": _share(with_m, lambda r: r.unrecovered == 0),
        "success_after_mistake": _share(with_m, lambda r: r.success),
    }
    fault = _fault(rs)
    if fault is not None:
        out["fault"] = fault
    return out


def _fault(rs: Sequence[EpisodeRecord]) -> dict[str, Any] | None:
    """The injected fault's outcome (``None`` when no episode had one scheduled)."""
    steps = {r.fault_step for r in rs if r.fault_step is not None}
    if not steps:
        return None
    hit = [r for r in rs if r.fault_injected]
    turns = [float(r.fault_turns_to_recover) for r in hit if r.fault_turns_to_recover]
    step = min(steps)
    return {
        "fault_step": step,
        "budget_left": max(0, rs[0].budget - step),
        "episodes_reached": len(hit),
        "recovered": _share(hit, lambda r: bool(r.fault_recovered)),
        "solved": _share(hit, lambda r: r.success),
        "turns_to_recover_mean": _mean(turns),
    }


def _cost(rs: Sequence[EpisodeRecord]) -> dict[str, Any]:
    lat = [r.latency_s for r in rs]
    n = len(rs)
    return {
        "model_calls": sum(r.model_calls for r in rs) / n,
        "env_calls": sum(r.env_calls for r in rs) / n,
        "tool_calls": sum(r.tool_calls for r in rs) / n,
        "input_tokens": sum(r.input_tokens for r in rs) / n,
        "output_tokens": sum(r.output_tokens for r in rs) / n,
        "tokens": sum(r.input_tokens + r.output_tokens for r in rs) / n,
        "cost_usd": sum(r.cost_usd for r in rs) / n,
        "turns_used": sum(r.turns_used for r in rs) / n,
        "latency_p50": percentile(lat, 50),
        "latency_p95": percentile(lat, 95),
        "latency_p99": percentile(lat, 99),
        "exhaustion_rate": sum(1 for r in rs if r.failure == "budget_exhausted") / n,
    }


def _task_counts(rs: Sequence[EpisodeRecord]) -> list[TaskCounts]:
    """Attempts and successes per task, in task order."""
    per_task: dict[str, list[bool]] = defaultdict(list)
    for r in rs:
        per_task[r.task_id].append(r.success)
    return [TaskCounts(t, len(v), sum(v)) for t, v in sorted(per_task.items())]


def _failures(rs: Sequence[EpisodeRecord]) -> dict[str, int]:
    """Episodes per failure category (every known category, zero included)."""
    failures = {c: 0 for c in FAILURE_CATEGORIES}
    for r in rs:
        failures[r.failure] = failures.get(r.failure, 0) + 1
    return failures


def _cell(
    budget: int, rs: Sequence[EpisodeRecord], counts: Sequence[TaskCounts], pk: PassKSummary
) -> dict[str, Any]:
    """The summary of one budget's episodes."""
    return {
        "budget": budget,
        "extrapolated": any(r.extrapolated for r in rs),
        "episodes": len(rs),
        "tasks": len(counts),
        "derived": sum(1 for r in rs if r.derived),
        "success_rate": sum(1 for r in rs if r.success) / len(rs),
        "pass_at_k": [e.to_dict() for e in pk.overall],
        "per_task": {t: [e.value for e in es] for t, es in pk.per_task.items()},
        "failures": _failures(rs),
        "recovery": _recovery(rs),
        "cost": _cost(rs),
    }


def summarize(
    records: Sequence[EpisodeRecord],
    *,
    max_k: int | None = None,
    level: float = 0.95,
    n_boot: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """Aggregate records into per-budget cells (see the module docstring).

    Raises:
        ConfigError: no records, or ``max_k`` above the samples of some task.
    """
    if not records:
        raise ConfigError("no records to summarize")
    by_budget: dict[int, list[EpisodeRecord]] = defaultdict(list)
    for r in records:
        by_budget[r.budget].append(r)
    metric = _cost_metric(records)
    counts = {budget: _task_counts(by_budget[budget]) for budget in sorted(by_budget)}
    top_k = min(min(c.n for c in cs) for cs in counts.values())
    if max_k is not None:
        top_k = min(max_k, top_k)
    cells: list[dict[str, Any]] = []
    frontier: list[dict[str, Any]] = []
    for budget, cs in counts.items():
        rs = by_budget[budget]
        pk = pass_at_k_summary(cs, top_k, level=level, n_boot=n_boot, seed=seed)
        attempt_cost = sum(_cost_of(r, metric) for r in rs) / len(rs)
        frontier += [
            {"k": e.k, "budget": budget, "cost": e.k * attempt_cost, "success": e.value}
            for e in pk.overall
        ]
        cells.append(_cell(budget, rs, cs, pk))
    pass1 = [c["pass_at_k"][0]["value"] for c in cells]
    return {
        "episodes": len(records),
        "tasks": sorted({r.task_id for r in records}),
        "budgets": [c["budget"] for c in cells],
        "max_k": top_k,
        "level": level,
        "ci_methods": {
            "per_task": "wilson (single-attempt rate mapped through 1-(1-p)^k)",
            "overall": f"percentile bootstrap over tasks, {n_boot} resamples, seed {seed}",
        },
        "cells": cells,
        "pass1_std_across_budgets": statistics.pstdev(pass1) if len(pass1) > 1 else 0.0,
        "frontier": {"metric": metric, "points": frontier, "pareto": _pareto(frontier)},
    }


def _pareto(points: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    best: list[dict[str, Any]] = []
    top = -1.0
    for p in sorted(points, key=lambda p: (p["cost"], -p["success"])):
        if p["success"] > top + 1e-12:
            best.append(dict(p))
            top = p["success"]
    return best


def success_at_cost(summary: Mapping[str, Any], cost: float) -> dict[str, Any] | None:
    """The best (k, T) whose cost is at most ``cost`` (``None`` if none is that cheap)."""
    ok = [p for p in summary["frontier"]["pareto"] if p["cost"] <= cost + 1e-12]
    return dict(max(ok, key=lambda p: p["success"])) if ok else None


def cost_at_success(summary: Mapping[str, Any], success: float) -> dict[str, Any] | None:
    """The cheapest (k, T) reaching ``success`` (``None`` if no cell does)."""
    ok = [p for p in summary["frontier"]["pareto"] if p["success"] >= success - 1e-12]
    return dict(min(ok, key=lambda p: p["cost"])) if ok else None
