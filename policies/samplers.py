"""Budget samplers: which turn budget T an evaluation or training episode runs under.

Fixed-budget training and BudgetMix RL differ only in the sampler. Every
sampler is seeded by the caller's ``random.Random`` and returns a
:class:`BudgetDraw` recording what it drew and why, so a rollout or an
evaluation row can always say which budget it ran under.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from budgetmix.exceptions import ConfigError

__all__ = [
    "BudgetDraw",
    "BudgetMix",
    "BudgetSampler",
    "FixedBudget",
    "PercentileCeiling",
    "sampler_from_config",
]


@dataclass(frozen=True, slots=True)
class BudgetDraw:
    """One sampled budget: the turn limit and the sampler's description of it."""

    turns: int
    sampler: str
    fraction: float | None = None
    ceiling: int | None = None


@runtime_checkable
class BudgetSampler(Protocol):
    """Draws a turn budget; deterministic for a given ``rng`` state."""

    def sample(self, rng: random.Random) -> BudgetDraw: ...

    def support(self) -> tuple[int, ...]:
        """Every budget this sampler can draw, ascending."""
        ...

    def to_config(self) -> dict[str, Any]: ...


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class FixedBudget:
    """Always the same budget T (the fixed-budget baseline)."""

    turns: int

    def __post_init__(self) -> None:
        _positive_int("FixedBudget.turns", self.turns)

    def sample(self, rng: random.Random) -> BudgetDraw:
        return BudgetDraw(turns=self.turns, sampler="fixed", fraction=1.0, ceiling=self.turns)

    def support(self) -> tuple[int, ...]:
        return (self.turns,)

    def to_config(self) -> dict[str, Any]:
        return {"kind": "fixed", "turns": self.turns}


@dataclass(frozen=True, slots=True)
class BudgetMix:
    """Budgets drawn as fractions of a ceiling, with weights (BudgetMix RL).

    ``T = max(1, round(fraction * ceiling))``. Default: 25/50/75/100% equally weighted.

    Raises:
        ConfigError: ceiling below 1, a fraction outside (0, 1], negative or all-zero
            weights, or weights of another length than fractions.
    """

    ceiling: int
    fractions: tuple[float, ...] = (0.25, 0.5, 0.75, 1.0)
    weights: tuple[float, ...] | None = None
    _cum: tuple[float, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _positive_int("BudgetMix.ceiling", self.ceiling)
        fr = tuple(float(f) for f in self.fractions)
        if not fr:
            raise ConfigError("BudgetMix.fractions must not be empty")
        for f in fr:
            if not math.isfinite(f) or not 0.0 < f <= 1.0:
                raise ConfigError(f"BudgetMix.fractions must lie in (0, 1], got {f!r}")
        w = tuple(float(x) for x in self.weights) if self.weights is not None else (1.0,) * len(fr)
        if len(w) != len(fr):
            raise ConfigError(f"BudgetMix.weights has {len(w)} entries for {len(fr)} fractions")
        if any(not math.isfinite(x) or x < 0 for x in w) or sum(w) <= 0:
            raise ConfigError(f"BudgetMix.weights must be >= 0 and not all zero, got {w!r}")
        object.__setattr__(self, "fractions", fr)
        object.__setattr__(self, "weights", w)
        total, acc, cum = sum(w), 0.0, []
        for x in w:
            acc += x / total
            cum.append(acc)
        object.__setattr__(self, "_cum", tuple(cum))

    def turns_for(self, fraction: float) -> int:
        return max(1, round(fraction * self.ceiling))

    def sample(self, rng: random.Random) -> BudgetDraw:
        u = rng.random()
        idx = next((i for i, c in enumerate(self._cum) if u < c), len(self._cum) - 1)
        f = self.fractions[idx]
        return BudgetDraw(
            turns=self.turns_for(f), sampler="budgetmix", fraction=f, ceiling=self.ceiling
        )

    def support(self) -> tuple[int, ...]:
        return tuple(sorted({self.turns_for(f) for f in self.fractions}))

    def to_config(self) -> dict[str, Any]:
        return {
            "kind": "budgetmix",
            "ceiling": self.ceiling,
            "fractions": list(self.fractions),
            "weights": list(self.weights or ()),
        }


@dataclass(frozen=True, slots=True)
class PercentileCeiling:
    """A BudgetMix whose ceiling is a percentile of observed unconstrained turn counts.

    The 75th percentile of unconstrained runs is a commonly reported cost sweet spot.
    """

    observed_turns: tuple[int, ...]
    percentile: float = 75.0
    fractions: tuple[float, ...] = (0.25, 0.5, 0.75, 1.0)
    weights: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if not self.observed_turns:
            raise ConfigError("PercentileCeiling.observed_turns must not be empty")
        for t in self.observed_turns:
            _positive_int("PercentileCeiling.observed_turns[]", t)
        if not 0.0 < self.percentile <= 100.0:
            raise ConfigError(
                f"PercentileCeiling.percentile must lie in (0, 100], got {self.percentile!r}"
            )
        object.__setattr__(self, "observed_turns", tuple(self.observed_turns))

    @property
    def ceiling(self) -> int:
        xs = sorted(self.observed_turns)
        # nearest-rank percentile: deterministic and always an observed value
        rank = max(1, math.ceil(self.percentile / 100.0 * len(xs)))
        return xs[rank - 1]

    def _mix(self) -> BudgetMix:
        return BudgetMix(ceiling=self.ceiling, fractions=self.fractions, weights=self.weights)

    def sample(self, rng: random.Random) -> BudgetDraw:
        draw = self._mix().sample(rng)
        return BudgetDraw(draw.turns, "percentile", draw.fraction, draw.ceiling)

    def support(self) -> tuple[int, ...]:
        return self._mix().support()

    def to_config(self) -> dict[str, Any]:
        return {
            "kind": "percentile",
            "observed_turns": list(self.observed_turns),
            "percentile": self.percentile,
            "fractions": list(self.fractions),
            "weights": list(self.weights) if self.weights is not None else None,
        }


def sampler_from_config(config: dict[str, Any]) -> BudgetSampler:
    """Build a sampler from ``{"kind": "fixed"|"budgetmix"|"percentile", ...}``.

    Raises:
        ConfigError: unknown kind or bad fields (the message names them).
    """
    cfg = dict(config)
    kind = cfg.pop("kind", None)
    builders: dict[str, type[Any]] = {
        "fixed": FixedBudget,
        "budgetmix": BudgetMix,
        "percentile": PercentileCeiling,
    }
    if kind not in builders:
        raise ConfigError(f"unknown budget sampler {kind!r}; known: {', '.join(builders)}")
    for key in ("fractions", "weights", "observed_turns"):
        if cfg.get(key) is not None:
            cfg[key] = tuple(cfg[key])
    try:
        sampler: BudgetSampler = builders[kind](**cfg)
    except TypeError as exc:
        raise ConfigError(f"bad {kind} sampler config: {exc}") from None
    return sampler


def _support_of(samplers: Sequence[BudgetSampler]) -> tuple[int, ...]:
    return tuple(sorted({t for s in samplers for t in s.support()}))
