"""Budget sensitivity: does a policy's choice at a state change with the turns left as it should?

On a map where the best move at some state depends on the turns left (the demo
map's start cell: go right with 4-9 turns left, wait with 10 or more), a
budget-aware policy changes its action with the budget and a budget-blind one
does not. :func:`budget_sensitivity` measures that from the start state of
fresh episodes played under each budget ``T`` (so turns left = ``T`` and the
context is the one a deployed model sees on its first turn):

* per budget, the policy's action distribution (``samples`` draws; Wilson
  intervals) and its share of budget-optimal choices (an action whose exact or
  estimated Q is within ``tol`` of the best);
* for the *flip action* ``a`` (optimal at some budgets, not at others; by
  default the one optimal at the shortest informative budget), the
  sensitivity ``mean_{k: a optimal} P(a | k) - mean_{k: a not optimal} P(a | k)``
  with a normal 95% interval from the per-budget binomial variances, and its
  noise floor (1.96 standard errors: what a budget-blind policy scores by chance).

The share of budget-optimal choices has its own noise floor,
``share_optimal_floor``: 1.96 standard errors of the difference between two
independent sample sets of the same policy (the policy against itself).

Grade against the right optimum: ``q`` should be the Q-function for the agent's
*measured* error rate (``frozenlake_q(model, error_rate=e)``, ``tools_q``,
``chain_q``; see :func:`~budgetmix.training.diagnostics.action_quality.measure_error_rate`).
An agent that is optimal for its own error rate then scores S = 1, and its
budget-dependent choices are the ones that pay for it; against the noiseless
optimum (``error_rate=0``, the published figures) it would score below 1.

Known answers (tested): a budget-blind policy scores 0 within its noise floor;
the budget-aware oracle scores 1; a policy that is aware on half of its draws
scores 0.5. Budgets where every action has the same Q (no choice matters) are
reported but left out of the sensitivity.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from budgetmix.environment import Task
from budgetmix.evaluation.passk import wilson_interval
from budgetmix.exceptions import ConfigError
from budgetmix.training.diagnostics.episodes import (
    LiveEpisode,
    Policy,
    QFunction,
    Snapshot,
    default_snapshot,
)

__all__ = ["BudgetCell", "SensitivityResult", "budget_sensitivity", "start_points"]


@dataclass(frozen=True, slots=True)
class BudgetCell:
    """The policy's choices at one budget (turns left) at the probed state.

    ``probabilities``/``low``/``high``: per move, the share of draws (Wilson 95%);
    ``invalid``: draws that are none of the moves; ``optimal``: the moves within
    ``tol`` of the best Q (all of them when the Q spread is within ``tol``:
    ``tied``); ``share_optimal`` (with ``optimal_low``/``optimal_high``): draws
    that chose an optimal move.
    """

    turns_left: int
    samples: int
    probabilities: dict[str, float]
    low: dict[str, float]
    high: dict[str, float]
    invalid: float
    q: dict[str, float]
    optimal: tuple[str, ...]
    tied: bool
    share_optimal: float
    optimal_low: float
    optimal_high: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {k: getattr(self, k) for k in self.__slots__}


@dataclass(frozen=True, slots=True)
class SensitivityResult:
    """Budget sensitivity of one policy at one state (see the module notes)."""

    state: Any
    flip_action: str
    optimal_budgets: tuple[int, ...]
    other_budgets: tuple[int, ...]
    sensitivity: float
    low: float
    high: float
    noise_floor: float
    share_optimal: float
    cells: tuple[BudgetCell, ...]
    share_optimal_floor: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (cells as dicts)."""
        out = {k: getattr(self, k) for k in self.__slots__ if k != "cells"}
        out["cells"] = [c.to_dict() for c in self.cells]
        return out

    def format(self) -> str:
        """S and the optimal share, each beside its noise floor, as one line."""
        return (
            f"sensitivity {self.sensitivity:+.2f} [{self.low:+.2f}, {self.high:+.2f}] "
            f"(noise floor {self.noise_floor:.2f}) for {self.flip_action!r}; optimal choices "
            f"{self.share_optimal * 100:.1f}% (noise floor {self.share_optimal_floor * 100:.1f}%)"
        )


def start_points(
    tasks: Sequence[Task],
    budgets: Sequence[int],
    *,
    notice_format: str = "v1-compact",
    snapshot: Snapshot = default_snapshot,
) -> list[Any]:
    """The first decision point of a fresh episode of every task under every budget.

    Returns one list of :class:`~budgetmix.training.diagnostics.episodes.DecisionPoint`,
    budget-major.

    Raises:
        ConfigError: a budget < 1 or no tasks.
    """
    if not tasks:
        raise ConfigError("tasks: give at least one task")
    if any(b < 1 for b in budgets):
        raise ConfigError(f"budgets: must be >= 1, got {min(budgets)}")
    return [LiveEpisode(t, b, notice_format, snapshot).point() for b in budgets for t in tasks]


def _cell(
    points: Sequence[Any],
    actions: Sequence[str],
    q: QFunction,
    moves: Sequence[str],
    parse: Any,
    tol: float,
) -> BudgetCell:
    n = len(actions)
    ids = [parse(a) for a in actions]
    qs = {m: q(points[0], m) for m in moves}
    best, worst = max(qs.values()), min(qs.values())
    tied = best - worst <= tol
    optimal = tuple(m for m in moves if qs[m] >= best - tol)
    probs, low, high = {}, {}, {}
    for i, m in enumerate(moves):
        c = sum(x == i for x in ids)
        probs[m] = c / n
        low[m], high[m] = wilson_interval(c, n)
    opt_ids = {moves.index(m) for m in optimal}
    good = sum(x in opt_ids for x in ids)
    lo, hi = wilson_interval(good, n)
    return BudgetCell(
        turns_left=points[0].turns_remaining,
        samples=n,
        probabilities=probs,
        low=low,
        high=high,
        invalid=sum(x is None for x in ids) / n,
        q=qs,
        optimal=optimal,
        tied=tied,
        share_optimal=good / n,
        optimal_low=lo,
        optimal_high=hi,
    )


def _flip(cells: Sequence[BudgetCell], action: str | None) -> tuple[str, list[int], list[int]]:
    informative = [c for c in cells if not c.tied]
    if action is None:
        for c in sorted(informative, key=lambda c: c.turns_left):
            if len(c.optimal) == 1 and any(c.optimal[0] not in o.optimal for o in informative):
                action = c.optimal[0]
                break
    if action is None:
        raise ConfigError("budget_sensitivity: the best action does not depend on the budget here")
    yes = [i for i, c in enumerate(cells) if not c.tied and action in c.optimal]
    no = [i for i, c in enumerate(cells) if not c.tied and action not in c.optimal]
    if not yes or not no:
        raise ConfigError(
            f"budget_sensitivity: {action!r} is optimal at all or none of the budgets"
        )
    return action, yes, no


def _mean_and_var(
    cells: Sequence[BudgetCell], idx: Sequence[int], action: str
) -> tuple[float, float]:
    ps = [cells[i].probabilities[action] for i in idx]
    var = sum(p * (1 - p) / cells[i].samples for p, i in zip(ps, idx, strict=True))
    return sum(ps) / len(ps), var / len(ps) ** 2


def budget_sensitivity(
    tasks: Sequence[Task],
    policy: Policy,
    budgets: Sequence[int],
    q: QFunction,
    parse: Any,
    *,
    moves: Sequence[str],
    flip_action: str | None = None,
    tol: float = 1e-9,
    notice_format: str = "v1-compact",
) -> SensitivityResult:
    """Budget sensitivity of ``policy`` at the start state (one draw per task and budget).

    ``parse(text) -> move index or None`` reads a reply (index into ``moves``);
    ``q(point, move)`` is the Q-function (exact or Monte Carlo). Every task must
    start in the same state (FrozenLake: the start cell). ``flip_action`` fixes the
    action whose probability is compared (default: see the module notes).

    Raises:
        ConfigError: no tasks, a budget < 1, tasks that start in different states, or
            a state whose best action does not depend on the budget.
    """
    ordered = sorted(set(budgets))
    points = start_points(tasks, ordered, notice_format=notice_format)
    if len({p.state for p in points}) != 1:
        raise ConfigError("budget_sensitivity: every task must start in the same state")
    actions = list(policy(points))
    if len(actions) != len(points):
        raise ConfigError("policy: must return one action per decision point")
    n = len(tasks)
    cells = tuple(
        _cell(points[i * n : (i + 1) * n], actions[i * n : (i + 1) * n], q, moves, parse, tol)
        for i in range(len(ordered))
    )
    action, yes, no = _flip(cells, flip_action)
    m_yes, v_yes = _mean_and_var(cells, yes, action)
    m_no, v_no = _mean_and_var(cells, no, action)
    se = math.sqrt(v_yes + v_no)
    # the noise floor: 1.96 standard errors of a blind policy with the same pooled rate
    pooled = sum(cells[i].probabilities[action] for i in (*yes, *no)) / (len(yes) + len(no))
    blind_var = pooled * (1 - pooled) / n * (1 / len(yes) + 1 / len(no))
    informative = [c for c in cells if not c.tied]
    share_var = sum(c.share_optimal * (1 - c.share_optimal) / c.samples for c in informative)
    return SensitivityResult(
        state=points[0].state,
        flip_action=action,
        optimal_budgets=tuple(cells[i].turns_left for i in yes),
        other_budgets=tuple(cells[i].turns_left for i in no),
        sensitivity=m_yes - m_no,
        low=m_yes - m_no - 1.96 * se,
        high=m_yes - m_no + 1.96 * se,
        noise_floor=1.96 * math.sqrt(blind_var),
        share_optimal=sum(c.share_optimal for c in informative) / len(informative),
        cells=cells,
        share_optimal_floor=1.96 * math.sqrt(2 * share_var) / len(informative),
    )
