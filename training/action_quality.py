"""Step-level action quality by expected Q, with its noise floor (issue 19 item 6).

:func:`compare_expected` asks two policies ``samples`` times at each of the same
decision points and compares the *expected* Q of their action distributions,
``E_A[Q] - E_B[Q]``, instead of one sampled action each (one draw per point puts
the chance level of "A better" near 8-9% on FrozenLake). Only non-tied points
count (points where the moves' Q spread exceeds ``tol``: elsewhere no choice
matters). The noise floor is what the same comparison scores between two
independent sample sets of one policy (A against A, B against B, averaged): a
share of "A better" at or below it is noise. A policy compared with itself scores
the noise floor (tested), and a deterministic policy against itself scores 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from budgetmix.training.diagnostics import DecisionPoint, Policy, QFunction
from budgetmix.training.envs.frozenlake_oracle import ACTIONS

__all__ = ["ExpectedComparison", "compare_expected", "expected_q", "non_tied"]


def expected_q(
    points: Sequence[DecisionPoint], policy: Policy, q: QFunction, samples: int
) -> list[float]:
    """Per point, the mean Q of ``samples`` actions the policy draws there.

    The policy is asked ``samples`` times for the same points, in order, so a
    policy that keeps per-row caches across calls (``LMPolicy``) reads each
    point's context once.
    """
    totals = [0.0] * len(points)
    for _ in range(samples):
        actions = list(policy(points))
        for i, (p, a) in enumerate(zip(points, actions, strict=True)):
            totals[i] += q(p, a)
    return [t / samples for t in totals]


def non_tied(
    points: Sequence[DecisionPoint], q: QFunction, tol: float, moves: Sequence[str] = ACTIONS
) -> list[DecisionPoint]:
    """The points where the best and the worst move differ by more than ``tol`` in Q."""
    out = []
    for p in points:
        values = [q(p, m) for m in moves]
        if max(values) - min(values) > tol:
            out.append(p)
    return out


def _shares(diffs: Sequence[float], tol: float) -> tuple[float | None, float | None, float | None]:
    if not diffs:
        return None, None, None
    n = len(diffs)
    better = sum(d > tol for d in diffs) / n
    worse = sum(d < -tol for d in diffs) / n
    return better, 1.0 - better - worse, worse


@dataclass(frozen=True, slots=True)
class ExpectedComparison:
    """Shares of non-tied points where A's expected Q beats B's by more than ``tol``.

    ``noise_floor``: the share "better" between two independent sample sets of the
    same policy (mean over A and B); ``*_after_mistake``: the same among points
    right after a mistake (a step that lost more than the mistake tolerance in Q).
    """

    points: int
    non_tied: int
    samples: int
    a_better: float | None
    tie: float | None
    b_better: float | None
    n_after_mistake: int
    a_better_after_mistake: float | None
    tie_after_mistake: float | None
    b_better_after_mistake: float | None
    noise_floor: float | None
    mean_q_a: float | None
    mean_q_b: float | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {k: getattr(self, k) for k in self.__slots__}


def compare_expected(
    points: Sequence[DecisionPoint],
    policy_a: Policy,
    policy_b: Policy,
    q: QFunction,
    *,
    samples: int = 16,
    tol: float = 0.01,
    moves: Sequence[str] = ACTIONS,
) -> ExpectedComparison:
    """Compare A and B by expected Q on the non-tied ``points`` (see the module notes)."""
    pts = non_tied(points, q, tol, moves)
    ea, eb = expected_q(pts, policy_a, q, samples), expected_q(pts, policy_b, q, samples)
    ea2, eb2 = expected_q(pts, policy_a, q, samples), expected_q(pts, policy_b, q, samples)
    diffs = [a - b for a, b in zip(ea, eb, strict=True)]
    after = [d for d, p in zip(diffs, pts, strict=True) if p.after_mistake]
    floors = [
        _shares([x - y for x, y in zip(u, v, strict=True)], tol)[0]
        for u, v in ((ea, ea2), (eb, eb2))
    ]
    known = [f for f in floors if f is not None]
    return ExpectedComparison(
        points=len(points),
        non_tied=len(pts),
        samples=samples,
        a_better=(s := _shares(diffs, tol))[0],
        tie=s[1],
        b_better=s[2],
        n_after_mistake=len(after),
        a_better_after_mistake=(m := _shares(after, tol))[0],
        tie_after_mistake=m[1],
        b_better_after_mistake=m[2],
        noise_floor=sum(known) / len(known) if known else None,
        mean_q_a=sum(ea) / len(ea) if ea else None,
        mean_q_b=sum(eb) / len(eb) if eb else None,
    )
