"""The unbiased pass@k estimator and its confidence intervals.

``pass@k`` is the probability that at least one of ``k`` attempts succeeds. From
``n`` independent samples of which ``c`` succeeded, the unbiased estimator
(Chen et al., 2021) is ``1 - C(n-c, k) / C(n, k)``; it is computed here in the
numerically stable product form ``1 - prod_{i=n-c+1}^{n} (1 - k / i)``, which
never forms a binomial coefficient.

Confidence intervals (``level`` defaults to 95%):

* **per task** — a Wilson score interval for the single-attempt rate ``p = c/n``,
  mapped through ``1 - (1 - p)^k`` (pass@k of ``k`` independent attempts at rate
  ``p``; the map is monotone, so the bounds carry over). For ``k = 1`` this is the
  plain Wilson interval. The unbiased estimate can fall outside the mapped
  interval (``n = k``, one success: the estimate is 1), so the interval is
  widened to contain it.
* **overall** (the mean over tasks) — a seeded percentile bootstrap over tasks:
  tasks are resampled with replacement and the mean of their per-task estimates
  is recomputed; with a single task the overall interval is the per-task one.
  Differences between two runs (:func:`bootstrap_difference`) resample tasks too,
  paired when both runs hold the same tasks.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from budgetmix.exceptions import ConfigError

__all__ = [
    "PassKEstimate",
    "PassKSummary",
    "TaskCounts",
    "bootstrap_difference",
    "bootstrap_mean_interval",
    "pass_at_k",
    "pass_at_k_curve",
    "pass_at_k_summary",
    "task_interval",
    "wilson_interval",
]


def _check_counts(n: int, c: int) -> None:
    if n < 1:
        raise ConfigError(f"n must be >= 1, got {n}")
    if not 0 <= c <= n:
        raise ConfigError(f"c must lie in [0, n={n}], got {c}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples with ``c`` successes.

    Raises:
        ConfigError: ``n < 1``, ``c`` outside ``[0, n]`` or ``k`` outside ``[1, n]``.
    """
    _check_counts(n, c)
    if not 1 <= k <= n:
        raise ConfigError(f"k must lie in [1, n={n}], got {k}")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def pass_at_k_curve(n: int, c: int, max_k: int | None = None) -> list[float]:
    """``[pass@1, ..., pass@max_k]`` (``max_k`` defaults to ``n``)."""
    top = n if max_k is None else max_k
    return [pass_at_k(n, c, k) for k in range(1, top + 1)]


def _z(level: float) -> float:
    if not 0.0 < level < 1.0:
        raise ConfigError(f"level must lie in (0, 1), got {level}")
    # inverse normal CDF by bisection on erf: exact enough, no scipy needed
    lo, hi, target = 0.0, 10.0, 0.5 + level / 2.0
    for _ in range(80):
        mid = (lo + hi) / 2.0
        if 0.5 * (1.0 + math.erf(mid / math.sqrt(2.0))) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def wilson_interval(successes: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial rate.

    Raises:
        ConfigError: bad counts or level.
    """
    _check_counts(n, successes)
    z = _z(level)
    p = successes / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    lo = 0.0 if successes == 0 else max(0.0, centre - half)
    hi = 1.0 if successes == n else min(1.0, centre + half)
    return lo, hi


def task_interval(n: int, c: int, k: int, level: float = 0.95) -> tuple[float, float]:
    """Per-task interval of pass@k: Wilson for ``c/n`` mapped through ``1-(1-p)^k``."""
    lo, hi = wilson_interval(c, n, level)
    return 1.0 - (1.0 - lo) ** k, 1.0 - (1.0 - hi) ** k


def _percentiles(values: list[float], level: float) -> tuple[float, float]:
    values.sort()
    alpha = (1.0 - level) / 2.0
    last = len(values) - 1
    lo = values[max(0, min(last, math.floor(alpha * last)))]
    hi = values[max(0, min(last, math.ceil((1.0 - alpha) * last)))]
    return lo, hi


def bootstrap_mean_interval(
    per_task: Sequence[float], *, level: float = 0.95, n_boot: int = 1000, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``per_task`` (tasks resampled).

    Raises:
        ConfigError: no values, ``n_boot < 1`` or a bad level.
    """
    if not per_task:
        raise ConfigError("per_task must not be empty")
    if n_boot < 1:
        raise ConfigError(f"n_boot must be >= 1, got {n_boot}")
    _z(level)
    rng = random.Random(seed)
    m = len(per_task)
    means = [sum(rng.choices(per_task, k=m)) / m for _ in range(n_boot)]
    return _percentiles(means, level)


def bootstrap_difference(
    a: Mapping[str, float],
    b: Mapping[str, float],
    *,
    level: float = 0.95,
    n_boot: int = 1000,
    seed: int = 0,
) -> tuple[float, float, float, bool]:
    """``mean(b) - mean(a)`` over tasks with a bootstrap interval.

    Paired (tasks resampled jointly) when both hold the same task ids, otherwise
    each side is resampled on its own. Returns ``(difference, lo, hi, paired)``.

    Raises:
        ConfigError: either side is empty, or bad bootstrap settings.
    """
    if not a or not b:
        raise ConfigError("both runs need at least one task")
    if n_boot < 1:
        raise ConfigError(f"n_boot must be >= 1, got {n_boot}")
    _z(level)
    rng = random.Random(seed)
    paired = set(a) == set(b)
    diff = sum(b.values()) / len(b) - sum(a.values()) / len(a)
    draws: list[float] = []
    if paired:
        keys = sorted(a)
        deltas = [b[t] - a[t] for t in keys]
        draws = [sum(rng.choices(deltas, k=len(deltas))) / len(deltas) for _ in range(n_boot)]
    else:
        av, bv = list(a.values()), list(b.values())
        for _ in range(n_boot):
            mb = sum(rng.choices(bv, k=len(bv))) / len(bv)
            ma = sum(rng.choices(av, k=len(av))) / len(av)
            draws.append(mb - ma)
    lo, hi = _percentiles(draws, level)
    return diff, lo, hi, paired


@dataclass(frozen=True, slots=True)
class TaskCounts:
    """``n`` samples and ``c`` successes of one task (in one grid cell)."""

    task_id: str
    n: int
    c: int

    def __post_init__(self) -> None:
        _check_counts(self.n, self.c)


@dataclass(frozen=True, slots=True)
class PassKEstimate:
    """One pass@k value with its interval and the method that produced it."""

    k: int
    value: float
    lo: float
    hi: float
    method: str

    def to_dict(self) -> dict[str, float | int | str]:
        """The estimate as a JSON-able dict: ``k``, ``value``, ``lo``, ``hi`` and ``method``."""
        return {
            "k": self.k,
            "value": self.value,
            "lo": self.lo,
            "hi": self.hi,
            "method": self.method,
        }


@dataclass(frozen=True, slots=True)
class PassKSummary:
    """pass@k for ``k = 1..max_k``: per task and overall (mean over tasks)."""

    max_k: int
    per_task: Mapping[str, tuple[PassKEstimate, ...]]
    overall: tuple[PassKEstimate, ...]

    def to_dict(self) -> dict[str, object]:
        """The summary as a JSON-able dict: ``max_k``, the overall estimates and the
        estimates per task id."""
        return {
            "max_k": self.max_k,
            "overall": [e.to_dict() for e in self.overall],
            "per_task": {t: [e.to_dict() for e in es] for t, es in self.per_task.items()},
        }


def pass_at_k_summary(
    counts: Sequence[TaskCounts],
    max_k: int | None = None,
    *,
    level: float = 0.95,
    n_boot: int = 1000,
    seed: int = 0,
) -> PassKSummary:
    """pass@k for every ``k <= max_k`` per task and overall, with intervals.

    ``max_k`` defaults to (and may not exceed) the smallest ``n`` among tasks.

    Raises:
        ConfigError: no tasks, a duplicate task id, or ``max_k`` out of range.
    """
    if not counts:
        raise ConfigError("counts must not be empty")
    ids = [t.task_id for t in counts]
    if len(set(ids)) != len(ids):
        raise ConfigError("counts has a duplicate task_id")
    min_n = min(t.n for t in counts)
    top = min_n if max_k is None else max_k
    if not 1 <= top <= min_n:
        raise ConfigError(f"max_k must lie in [1, {min_n}] (smallest n), got {top}")
    per_task: dict[str, tuple[PassKEstimate, ...]] = {}
    values: dict[int, list[float]] = {k: [] for k in range(1, top + 1)}
    for t in counts:
        row = []
        for k in range(1, top + 1):
            v = pass_at_k(t.n, t.c, k)
            lo, hi = task_interval(t.n, t.c, k, level)
            lo, hi = min(lo, v), max(hi, v)  # the estimator may sit outside the mapped interval
            row.append(PassKEstimate(k, v, lo, hi, "wilson"))
            values[k].append(v)
        per_task[t.task_id] = tuple(row)
    overall = []
    for k in range(1, top + 1):
        vs = values[k]
        mean = sum(vs) / len(vs)
        if len(vs) == 1:
            e = per_task[ids[0]][k - 1]
            overall.append(PassKEstimate(k, mean, e.lo, e.hi, "wilson"))
        else:
            lo, hi = bootstrap_mean_interval(vs, level=level, n_boot=n_boot, seed=seed + k)
            overall.append(PassKEstimate(k, mean, lo, hi, "bootstrap-tasks"))
    return PassKSummary(max_k=top, per_task=per_task, overall=tuple(overall))
