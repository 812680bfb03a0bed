"""Seed-level statistics of the preregistered design (docs/prereg.md): t-intervals, Holm,
the exact sign-flip test and the hierarchical bootstrap.

The unit of analysis is the training seed: a paired difference is one number per
seed (the same evaluation episodes for both arms), its mean gets a Student-t 95%
interval with ``seeds - 1`` degrees of freedom and a two-sided p-value; the
per-budget cells are Holm-corrected. Beside the t interval (issue 29):

* :func:`sign_flip_test`: the exact permutation test of a zero mean over the
  units (every one of the ``2**n`` sign assignments; no distributional
  assumption; the smallest p it can give is ``2 / 2**n``);
* :func:`hierarchical_bootstrap`: a percentile interval from resampling the
  design's levels in turn (SFT base, then training seed within it, then
  evaluation episode within that), so every source of variation is in it.

Pure Python (no scipy): the t distribution through the regularised incomplete
beta function.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from budgetmix.exceptions import ConfigError

__all__ = [
    "BootstrapInterval",
    "MeanTest",
    "SignFlipTest",
    "hierarchical_bootstrap",
    "holm",
    "mean_test",
    "sign_flip_test",
    "t_cdf",
    "t_quantile",
]

#: Most units the exact sign-flip test enumerates (2**20 sign assignments).
MAX_SIGN_FLIP_UNITS = 20


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (Lentz's method)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((qam + m2) * (a + m2)),
                    -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):  # fmt: skip
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-14:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function ``I_x(a, b)``."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbeta = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    front = math.exp(lbeta + a * math.log(x) + b * math.log(1.0 - x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: int) -> float:
    """``P(T <= t)`` for Student's t with ``df`` degrees of freedom."""
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t (bisection on :func:`t_cdf`)."""
    lo, hi = -1e4, 1e4
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


@dataclass(frozen=True, slots=True)
class MeanTest:
    """Mean of per-seed values with a 95% t-interval and the two-sided p for mean = 0."""

    n: int
    mean: float
    lo: float
    hi: float
    p: float
    values: tuple[float, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {k: getattr(self, k) for k in self.__slots__} | {"values": list(self.values)}


def mean_test(values: Sequence[float]) -> MeanTest:
    """One-sample t on per-seed values (with one seed: no interval, p = 1).

    Raises:
        ConfigError: no values.
    """
    xs = [float(v) for v in values]
    if not xs:
        raise ConfigError("mean_test: no values")
    n, mean = len(xs), sum(xs) / len(xs)
    if n < 2:
        return MeanTest(n, mean, -math.inf, math.inf, 1.0, tuple(xs))
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    se = sd / math.sqrt(n)
    half = t_quantile(0.975, n - 1) * se
    exact = 1.0 if mean == 0.0 else 0.0  # no spread: the mean is known exactly
    p = exact if se == 0.0 else 2.0 * (1.0 - t_cdf(abs(mean) / se, n - 1))
    return MeanTest(n, mean, mean - half, mean + half, min(1.0, p), tuple(xs))


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values (step-down, monotone, capped at 1), in the input order."""
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    m, out, running = len(pvalues), [0.0] * len(pvalues), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


@dataclass(frozen=True, slots=True)
class SignFlipTest:
    """The exact two-sided sign-flip test of mean = 0 over ``n`` units.

    ``p`` is the share of the ``2**n`` sign assignments whose mean is at least as
    far from 0 as the observed one; ``p_min`` is the smallest p this ``n`` allows.
    """

    n: int
    mean: float
    p: float
    p_min: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {k: getattr(self, k) for k in self.__slots__}


def sign_flip_test(values: Sequence[float]) -> SignFlipTest:
    """Exact sign-flip permutation test on per-unit paired differences.

    Raises:
        ConfigError: no values, or more than :data:`MAX_SIGN_FLIP_UNITS`.
    """
    xs = [float(v) for v in values]
    if not xs:
        raise ConfigError("sign_flip_test: no values")
    if len(xs) > MAX_SIGN_FLIP_UNITS:
        raise ConfigError(f"sign_flip_test: at most {MAX_SIGN_FLIP_UNITS} units, got {len(xs)}")
    n = len(xs)
    observed = abs(sum(xs))
    tol = 1e-12 * max(1.0, observed)
    hits = sum(
        abs(sum(s * x for s, x in zip(signs, xs, strict=True))) >= observed - tol
        for signs in itertools.product((1.0, -1.0), repeat=n)
    )
    return SignFlipTest(n, sum(xs) / n, hits / 2**n, min(1.0, 2 / 2**n))


@dataclass(frozen=True, slots=True)
class BootstrapInterval:
    """A hierarchical-bootstrap percentile interval of the grand mean."""

    mean: float
    lo: float
    hi: float
    reps: int
    levels: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {k: getattr(self, k) for k in self.__slots__} | {"levels": list(self.levels)}


def _grand_mean(tree: Sequence[Sequence[Sequence[float]]]) -> float:
    """Mean over bases of the mean over seeds of the mean over episodes."""
    return sum(sum(sum(e) / len(e) for e in b) / len(b) for b in tree) / len(tree)


def hierarchical_bootstrap(
    tree: Sequence[Sequence[Sequence[float]]],
    *,
    reps: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> BootstrapInterval:
    """Percentile interval of the grand mean of ``tree[base][seed][episode]``.

    Each replicate draws bases with replacement, then seeds with replacement within
    each drawn base, then episodes with replacement within each drawn seed, and
    takes the same grand mean (every level weighted equally, as the point estimate).
    Seeded: the same call gives the same interval.

    Raises:
        ConfigError: an empty level anywhere, ``reps`` < 100 or ``level`` outside (0, 1).
    """
    if not tree or any(not b or any(not e for e in b) for b in tree):
        raise ConfigError("hierarchical_bootstrap: every base, seed and episode list needs items")
    if not isinstance(reps, int) or reps < 100:
        raise ConfigError(f"hierarchical_bootstrap: reps must be an integer >= 100, got {reps!r}")
    if not 0.0 < level < 1.0:
        raise ConfigError(f"hierarchical_bootstrap: level must lie in (0, 1), got {level!r}")
    rng = random.Random(seed)
    data = [[[float(x) for x in e] for e in b] for b in tree]
    stats = []
    for _ in range(reps):
        total = 0.0
        for b in rng.choices(data, k=len(data)):
            seeds = rng.choices(b, k=len(b))
            total += sum(sum(rng.choices(e, k=len(e))) / len(e) for e in seeds) / len(seeds)
        stats.append(total / len(data))
    stats.sort()
    tail = (1.0 - level) / 2.0
    lo = stats[min(reps - 1, math.floor(tail * reps))]
    hi = stats[min(reps - 1, math.ceil((1.0 - tail) * reps) - 1)]
    levels = (len(data), sum(len(b) for b in data), sum(len(e) for b in data for e in b))
    return BootstrapInterval(_grand_mean(data), lo, hi, reps, levels)
