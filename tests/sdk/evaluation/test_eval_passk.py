"""The unbiased pass@k estimator against brute-force enumeration, and its intervals."""

from __future__ import annotations

import itertools
import math

import pytest
from budgetmix.evaluation import (
    TaskCounts,
    bootstrap_difference,
    pass_at_k,
    pass_at_k_curve,
    pass_at_k_summary,
    wilson_interval,
)
from budgetmix.exceptions import ConfigError


def brute_force(n: int, c: int, k: int) -> float:
    """Share of the k-subsets of n samples (c successes) holding at least one success."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n", range(1, 10))
def test_estimator_equals_brute_force(n: int) -> None:
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(brute_force(n, c, k), abs=1e-12)


def test_estimator_equals_closed_form_for_large_n() -> None:
    n, c = 200, 13
    for k in (1, 5, 50, 150):
        exact = 1.0 - math.comb(n - c, k) / math.comb(n, k)
        assert pass_at_k(n, c, k) == pytest.approx(exact, rel=1e-9)
    # the product form stays finite where binomials would be astronomically large
    assert 0.0 < pass_at_k(5000, 3, 10) < 1.0


def test_curve_is_monotone_with_edges() -> None:
    curve = pass_at_k_curve(10, 3)
    assert len(curve) == 10
    assert curve == sorted(curve)
    assert curve[0] == pytest.approx(0.3)
    assert pass_at_k_curve(5, 0) == [0.0] * 5
    assert pass_at_k_curve(5, 5) == [1.0] * 5


@pytest.mark.parametrize(("n", "c", "k"), [(0, 0, 1), (3, 4, 1), (3, -1, 1), (3, 1, 4), (3, 1, 0)])
def test_bad_counts_raise(n: int, c: int, k: int) -> None:
    with pytest.raises(ConfigError):
        pass_at_k(n, c, k)


def test_wilson_known_values() -> None:
    lo, hi = wilson_interval(5, 10)
    assert lo == pytest.approx(0.2366, abs=1e-3)
    assert hi == pytest.approx(0.7634, abs=1e-3)
    lo, hi = wilson_interval(0, 10)
    assert lo == 0.0 and 0.25 < hi < 0.35
    with pytest.raises(ConfigError):
        wilson_interval(1, 2, level=1.5)


def test_summary_per_task_and_overall() -> None:
    counts = [TaskCounts("a", 4, 1), TaskCounts("b", 4, 4), TaskCounts("c", 5, 0)]
    s = pass_at_k_summary(counts, n_boot=300, seed=7)
    assert s.max_k == 4  # the smallest n
    assert [e.value for e in s.per_task["a"]] == pytest.approx(pass_at_k_curve(4, 1))
    for k in range(1, 5):
        o = s.overall[k - 1]
        mean = sum(pass_at_k(t.n, t.c, k) for t in counts) / 3
        assert o.value == pytest.approx(mean)
        assert o.lo <= o.value <= o.hi
        assert o.method == "bootstrap-tasks"
        for t in counts:
            e = s.per_task[t.task_id][k - 1]
            assert e.lo <= e.value + 1e-12 and e.value <= e.hi + 1e-12
    # seeded: the same intervals again
    assert pass_at_k_summary(counts, n_boot=300, seed=7) == s
    with pytest.raises(ConfigError):
        pass_at_k_summary(counts, max_k=5)


def test_single_task_overall_uses_wilson() -> None:
    s = pass_at_k_summary([TaskCounts("only", 10, 5)], max_k=1)
    assert s.overall[0].method == "wilson"
    assert (s.overall[0].lo, s.overall[0].hi) == pytest.approx(wilson_interval(5, 10))


def test_bootstrap_difference_paired_and_unpaired() -> None:
    a = {"t1": 0.2, "t2": 0.4, "t3": 0.6}
    b = {"t1": 0.3, "t2": 0.5, "t3": 0.7}
    diff, lo, hi, paired = bootstrap_difference(a, b, n_boot=200)
    assert paired and diff == pytest.approx(0.1)
    assert lo == pytest.approx(0.1) and hi == pytest.approx(0.1)  # constant paired deltas
    diff, lo, hi, paired = bootstrap_difference(a, {"u": 1.0, "v": 0.0}, n_boot=200)
    assert not paired and lo <= diff <= hi
