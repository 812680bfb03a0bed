"""Mistake injection: force one move at a given turn and measure how often a policy still
succeeds under the budget (the paper's recovery diagnostic on top of
:mod:`budgetmix.training.diagnostics.episodes`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from budgetmix.environment import Task
from budgetmix.exceptions import ConfigError
from budgetmix.progress import ProgressLine
from budgetmix.training.diagnostics.episodes import (
    DecisionPoint,
    Policy,
    QFunction,
    _curve_point,
    run_episodes,
)

__all__ = ["RecoveryResult", "recovery_injection"]


@dataclass(frozen=True, slots=True)
class RecoveryResult:
    """Mistake injection at turn ``inject_at`` under ``budget`` turns.

    ``injected``: episodes still running at that turn (the mistake was forced);
    ``recovered``: of those, how many still succeeded. ``baseline_rate``: success
    of the same episodes (same seeds) without the injection. ``oracle_rate``: the
    best achievable success after the injected step, averaged over the same
    episodes (``None`` without a Q-function).
    """

    budget: int
    inject_at: int
    injected: int
    recovered: int
    rate: float
    low: float
    high: float
    baseline_rate: float
    oracle_rate: float | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {k: getattr(self, k) for k in self.__slots__}


def recovery_injection(
    tasks: Sequence[Task],
    policy: Policy,
    budget: int,
    inject_at: int,
    forced: Callable[[DecisionPoint], str],
    *,
    q: QFunction | None = None,
    notice_format: str = "v1-compact",
    progress: ProgressLine | None = None,
) -> RecoveryResult:
    """Force ``forced(point)`` at turn ``inject_at``; how often does ``policy`` still succeed?

    Raises:
        ConfigError: ``inject_at`` outside ``1..budget``.
    """
    if not 1 <= inject_at <= budget:
        raise ConfigError(f"inject_at: must lie in 1..{budget}, got {inject_at}")
    fmt = notice_format
    with_fault = run_episodes(
        tasks, policy, budget, notice_format=fmt, force={inject_at: forced}, progress=progress
    )
    clean = run_episodes(tasks, policy, budget, notice_format=fmt, progress=progress)
    hit = [i for i, tr in enumerate(with_fault) if len(tr.points) >= inject_at]
    wins = sum(with_fault[i].success for i in hit)
    base = sum(clean[i].success for i in hit) / len(hit) if hit else 0.0
    oracle: float | None = None
    if q is not None and hit:
        values = []
        for i in hit:
            p = with_fault[i].points[inject_at - 1]
            values.append(q(p, with_fault[i].actions[inject_at - 1]))
        oracle = sum(values) / len(values)
    cp = _curve_point(budget, wins, len(hit))
    return RecoveryResult(budget, inject_at, len(hit), wins, cp.rate, cp.low, cp.high, base, oracle)
