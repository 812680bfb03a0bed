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

Grade against the right optimum: pass a Q-function for the agent's *measured*
error rate (``frozenlake_q(model, error_rate=e)``, ``tools_q``, ``chain_q``, or
``exact_model(name, kwargs).q_for(e)``): for an agent that errs, hurrying can be
right, and the noiseless optimum would count it as a mistake.
:func:`measure_error_rate` measures ``e`` (the share of draws that are not the
optimum's move, at points with one best move, iterated to a fixed point).
:func:`recovery_analysis` is the paper's recovery finding: per training seed,
the share of the base's states where the RL policy's expected Q beats the
base's, over all states and right after a mistake, with the noise floors and a
t interval over seeds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from budgetmix.exceptions import ConfigError
from budgetmix.training.diagnostics.episodes import DecisionPoint, Policy, QFunction
from budgetmix.training.envs.frozenlake_oracle import ACTIONS

__all__ = [
    "ErrorRate",
    "ExpectedComparison",
    "RecoveryAnalysis",
    "compare_expected",
    "expected_q",
    "measure_error_rate",
    "non_tied",
    "recovery_analysis",
    "unique_best",
]


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
    right after a mistake (a step that lost more than the mistake tolerance in Q),
    with its own floor ``noise_floor_after_mistake``.
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
    noise_floor_after_mistake: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {k: getattr(self, k) for k in self.__slots__}

    def format(self, a: str = "A", b: str = "B") -> list[str]:
        """Each share beside its noise floor (the policy against itself), as text lines."""
        return [
            f"{a} better than {b}: {_pct(self.a_better)} of {self.non_tied} states "
            f"(noise floor {_pct(self.noise_floor)}); {b} better {_pct(self.b_better)}",
            f"right after a mistake: {_pct(self.a_better_after_mistake)} of "
            f"{self.n_after_mistake} (noise floor {_pct(self.noise_floor_after_mistake)}); "
            f"{b} better {_pct(self.b_better_after_mistake)}",
        ]


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:.1f}%"


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _floor(pairs: Sequence[tuple[Sequence[float], Sequence[float]]], tol: float) -> float | None:
    known = [
        f
        for u, v in pairs
        if (f := _shares([x - y for x, y in zip(u, v, strict=True)], tol)[0]) is not None
    ]
    return sum(known) / len(known) if known else None


def _compare(
    points: Sequence[DecisionPoint],
    pts: Sequence[DecisionPoint],
    a: tuple[list[float], list[float]],
    b: tuple[list[float], list[float]],
    samples: int,
    tol: float,
) -> ExpectedComparison:
    """The comparison from two independent expected-Q sets of each policy on ``pts``."""
    diffs = [x - y for x, y in zip(a[0], b[0], strict=True)]
    after = [i for i, p in enumerate(pts) if p.after_mistake]
    post = [diffs[i] for i in after]
    only = [([u[i] for i in after], [v[i] for i in after]) for u, v in (a, b)]
    return ExpectedComparison(
        points=len(points),
        non_tied=len(pts),
        samples=samples,
        a_better=(s := _shares(diffs, tol))[0],
        tie=s[1],
        b_better=s[2],
        n_after_mistake=len(post),
        a_better_after_mistake=(m := _shares(post, tol))[0],
        tie_after_mistake=m[1],
        b_better_after_mistake=m[2],
        noise_floor=_floor([a, b], tol),
        mean_q_a=_mean(a[0]),
        mean_q_b=_mean(b[0]),
        noise_floor_after_mistake=_floor(only, tol),
    )


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
    return _compare(points, pts, (ea, ea2), (eb, eb2), samples, tol)


@dataclass(frozen=True, slots=True)
class ErrorRate:
    """A policy's measured error rate with a Wilson 95% interval, and the draws it counts."""

    rate: float
    low: float
    high: float
    errors: int
    draws: int
    points: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {k: getattr(self, k) for k in self.__slots__}


def unique_best(
    points: Sequence[DecisionPoint], q: QFunction, moves: Sequence[str], *, tol: float = 0.01
) -> list[tuple[DecisionPoint, str]]:
    """The points where one of ``moves`` is best by more than ``tol`` under ``q``, each with
    that move: the points an error rate is graded at (a tie or a near-tie has no error)."""
    out = []
    for p in points:
        values = sorted(((q(p, m), m) for m in moves), reverse=True)
        if values[0][0] - values[1][0] > tol:
            out.append((p, values[0][1]))
    return out


def measure_error_rate(
    points: Sequence[DecisionPoint],
    policy: Policy,
    q_for: Callable[[float], QFunction],
    moves: Sequence[str],
    *,
    samples: int = 8,
    tol: float = 0.01,
    iterations: int = 4,
) -> ErrorRate:
    """The share of the policy's draws that are not the optimum's move, ``e``.

    Counted at the points where one move is best by more than ``tol`` under
    ``q_for(e)`` (the optimum for an agent erring at ``e``), starting from
    ``e = 0`` and re-measured ``iterations`` times at the last estimate (the
    optimum depends on ``e``). The policy's draws are made once. A reply that is
    none of the moves counts as an error.

    Raises:
        ConfigError: ``samples`` or ``iterations`` < 1, or no point has one best move.
    """
    from budgetmix.evaluation.passk import wilson_interval

    if samples < 1 or iterations < 1:
        raise ConfigError("samples, iterations: must be >= 1")
    draws = [list(policy(points)) for _ in range(samples)]
    index = {id(p): i for i, p in enumerate(points)}
    rate, errors, total, n = 0.0, 0, 0, 0
    for _ in range(iterations):
        graded = unique_best(points, q_for(rate), moves, tol=tol)
        if not graded:
            raise ConfigError("points: no point has one best move (nothing to grade)")
        errors = sum(d[index[id(p)]] != best for p, best in graded for d in draws)
        total, n = len(graded) * samples, len(graded)
        rate = errors / total
    low, high = wilson_interval(errors, total)
    return ErrorRate(rate, low, high, errors, total, n)


@dataclass(frozen=True, slots=True)
class RecoveryAnalysis:
    """RL against base from the base's states, per seed and over seeds.

    ``all_states`` / ``after_mistake``: the mean over seeds of the share of states
    where RL's expected Q beats the base's, with a 95% t interval over seeds
    (``*_low``/``*_high``); ``noise_floor*``: the same share between two sample
    sets of one policy (mean over the seeds' and the base's); ``gap``: after a
    mistake minus over all states, per seed, with its interval (the paper's
    comparison; a policy against itself has two different floors, so read each
    share against its own floor). ``per_seed``: each seed's :class:`ExpectedComparison`.
    """

    seeds: tuple[str, ...]
    all_states: float
    all_low: float
    all_high: float
    after_mistake: float
    after_low: float
    after_high: float
    gap: float
    gap_low: float
    gap_high: float
    noise_floor: float | None
    noise_floor_after_mistake: float | None
    per_seed: tuple[ExpectedComparison, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (per-seed comparisons as dicts)."""
        out = {k: getattr(self, k) for k in self.__slots__ if k != "per_seed"}
        return out | {"seeds": list(self.seeds), "per_seed": [c.to_dict() for c in self.per_seed]}

    def format(self) -> list[str]:
        """The two shares beside their noise floors and intervals, as text lines."""
        n = len(self.seeds)
        return [
            f"RL better than base, all states: {_pct(self.all_states)} "
            f"[{_pct(self.all_low)}, {_pct(self.all_high)}] over {n} seeds "
            f"(noise floor {_pct(self.noise_floor)})",
            f"right after a mistake: {_pct(self.after_mistake)} "
            f"[{_pct(self.after_low)}, {_pct(self.after_high)}] "
            f"(noise floor {_pct(self.noise_floor_after_mistake)}); "
            f"difference {self.gap * 100:+.1f} "
            f"[{self.gap_low * 100:+.1f}, {self.gap_high * 100:+.1f}] points",
        ]


def recovery_analysis(
    points: Sequence[DecisionPoint],
    base: Policy,
    rl: Mapping[str, Policy],
    q: QFunction,
    *,
    samples: int = 16,
    tol: float = 0.01,
    moves: Sequence[str] = ACTIONS,
) -> RecoveryAnalysis:
    """Per RL seed, :func:`compare_expected` of the seed's policy against ``base`` on the
    non-tied ``points`` (the base's own states; ``after_mistake`` marks the states right
    after a mistake), then the mean over seeds with t intervals (module notes). The base
    is asked twice per point in all (its two sample sets serve every seed).

    Raises:
        ConfigError: no RL policy, or no seed has a state right after a mistake.
    """
    from budgetmix.training.diagnostics.stats import mean_test

    if not rl:
        raise ConfigError("rl: give at least one RL policy (one per training seed)")
    pts = non_tied(points, q, tol, moves)
    eb = (expected_q(pts, base, q, samples), expected_q(pts, base, q, samples))
    per = []
    for policy in rl.values():
        ea = (expected_q(pts, policy, q, samples), expected_q(pts, policy, q, samples))
        per.append(_compare(points, pts, ea, eb, samples, tol))
    if any(c.a_better_after_mistake is None for c in per):
        raise ConfigError("points: no state right after a mistake to compare at")
    overall = mean_test([c.a_better or 0.0 for c in per])
    after = mean_test([c.a_better_after_mistake or 0.0 for c in per])
    gap = mean_test([(c.a_better_after_mistake or 0.0) - (c.a_better or 0.0) for c in per])
    floors = [c.noise_floor for c in per if c.noise_floor is not None]
    post = [c.noise_floor_after_mistake for c in per if c.noise_floor_after_mistake is not None]
    return RecoveryAnalysis(
        tuple(rl), overall.mean, overall.lo, overall.hi, after.mean, after.lo, after.hi,
        gap.mean, gap.lo, gap.hi, _mean(floors), _mean(post), tuple(per),
    )  # fmt: skip
