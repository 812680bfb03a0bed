"""Budget samplers: which turn budget T an evaluation or training episode runs under.

Fixed-budget training and BudgetMix RL differ only in the sampler. Every
sampler is seeded by the caller's ``random.Random`` and returns a
:class:`BudgetDraw` recording what it drew and why, so a rollout or an
evaluation row can always say which budget it ran under.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

from budgetmix._validate import check_between, check_int, check_ints, check_list, check_number
from budgetmix.exceptions import ConfigError
from budgetmix.policies._from_config import build, read_kind

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

    def sample(self, rng: random.Random) -> BudgetDraw:
        """One budget, drawn with ``rng``."""
        ...

    def support(self) -> tuple[int, ...]:
        """Every budget this sampler can draw, ascending."""
        ...

    def to_config(self) -> dict[str, Any]:
        """The sampler as a config mapping; :func:`sampler_from_config` inverts it."""
        ...


def _mix_shares(
    owner: str, fractions: Any, weights: Any
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The checked fractions of a mix, each in (0, 1], and its weights (equal by default)."""
    fr = tuple(
        check_between(f"{owner}.fractions", f, 0, 1, open_low=True)
        for f in check_list(f"{owner}.fractions", fractions)
    )
    if weights is None:
        return fr, (1.0,) * len(fr)
    w = tuple(check_number(f"{owner}.weights", x) for x in check_list(f"{owner}.weights", weights))
    if len(w) != len(fr):
        raise ConfigError(f"{owner}.weights has {len(w)} entries for {len(fr)} fractions")
    if sum(w) <= 0:
        raise ConfigError(f"{owner}.weights must not be all zero, got {list(w)!r}")
    return fr, w


@dataclass(frozen=True, slots=True)
class FixedBudget:
    """Always the same budget T (the fixed-budget baseline)."""

    turns: int
    config_kind: ClassVar[str] = "fixed"

    def __post_init__(self) -> None:
        check_int("FixedBudget.turns", self.turns, minimum=1)

    def sample(self, rng: random.Random) -> BudgetDraw:
        """Always ``turns``."""
        return BudgetDraw(turns=self.turns, sampler="fixed", fraction=1.0, ceiling=self.turns)

    def support(self) -> tuple[int, ...]:
        """``(turns,)``."""
        return (self.turns,)

    def to_config(self) -> dict[str, Any]:
        """``{"kind": "fixed", "turns": turns}``."""
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
    config_kind: ClassVar[str] = "budgetmix"

    def __post_init__(self) -> None:
        check_int("BudgetMix.ceiling", self.ceiling, minimum=1)
        fr, w = _mix_shares("BudgetMix", self.fractions, self.weights)
        object.__setattr__(self, "fractions", fr)
        object.__setattr__(self, "weights", w)
        total, acc, cum = sum(w), 0.0, []
        for x in w:
            acc += x / total
            cum.append(acc)
        object.__setattr__(self, "_cum", tuple(cum))

    def turns_for(self, fraction: float) -> int:
        """The budget ``fraction`` of the ceiling gives: ``max(1, round(fraction * ceiling))``."""
        return max(1, round(fraction * self.ceiling))

    def sample(self, rng: random.Random) -> BudgetDraw:
        """A fraction drawn by weight, as a budget."""
        u = rng.random()
        idx = next((i for i, c in enumerate(self._cum) if u < c), len(self._cum) - 1)
        f = self.fractions[idx]
        return BudgetDraw(
            turns=self.turns_for(f), sampler="budgetmix", fraction=f, ceiling=self.ceiling
        )

    def support(self) -> tuple[int, ...]:
        """The budgets of the fractions, ascending, without repeats."""
        return tuple(sorted({self.turns_for(f) for f in self.fractions}))

    def to_config(self) -> dict[str, Any]:
        """Ceiling, fractions and weights, as lists."""
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

    Raises:
        ConfigError: no observed turns, one below 1, a percentile outside (0, 100],
            or fractions and weights :class:`BudgetMix` refuses.
    """

    observed_turns: tuple[int, ...]
    percentile: float = 75.0
    fractions: tuple[float, ...] = (0.25, 0.5, 0.75, 1.0)
    weights: tuple[float, ...] | None = None
    config_kind: ClassVar[str] = "percentile"

    def __post_init__(self) -> None:
        turns = check_ints("PercentileCeiling.observed_turns", self.observed_turns, minimum=1)
        object.__setattr__(self, "observed_turns", turns)
        percentile = check_between(
            "PercentileCeiling.percentile", self.percentile, 0, 100, open_low=True
        )
        object.__setattr__(self, "percentile", percentile)
        fr, w = _mix_shares("PercentileCeiling", self.fractions, self.weights)
        object.__setattr__(self, "fractions", fr)
        if self.weights is not None:
            object.__setattr__(self, "weights", w)

    @property
    def ceiling(self) -> int:
        """The nearest-rank ``percentile`` of the observed turn counts."""
        xs = sorted(self.observed_turns)
        # nearest-rank percentile: deterministic and always an observed value
        rank = max(1, math.ceil(self.percentile / 100.0 * len(xs)))
        return xs[rank - 1]

    def _mix(self) -> BudgetMix:
        return BudgetMix(ceiling=self.ceiling, fractions=self.fractions, weights=self.weights)

    def sample(self, rng: random.Random) -> BudgetDraw:
        """A draw of the :class:`BudgetMix` over the percentile ceiling."""
        draw = self._mix().sample(rng)
        return BudgetDraw(draw.turns, "percentile", draw.fraction, draw.ceiling)

    def support(self) -> tuple[int, ...]:
        """The budgets the mix over the ceiling can draw."""
        return self._mix().support()

    def to_config(self) -> dict[str, Any]:
        """Observed turns, percentile, fractions and weights, as lists."""
        return {
            "kind": "percentile",
            "observed_turns": list(self.observed_turns),
            "percentile": self.percentile,
            "fractions": list(self.fractions),
            "weights": list(self.weights) if self.weights is not None else None,
        }


_KINDS: dict[str, type[FixedBudget | BudgetMix | PercentileCeiling]] = {
    cls.config_kind: cls for cls in (FixedBudget, BudgetMix, PercentileCeiling)
}


def sampler_from_config(config: Mapping[str, Any] | str, *, path: str = "sampler") -> BudgetSampler:
    """Build a sampler from ``{"kind": "fixed"|"budgetmix"|"percentile", ...}``.

    Raises:
        ConfigError: unknown kind, a missing, unknown or bad field; names the field
            (``sampler.ceiling``).
    """
    kind, cfg = read_kind(config, path=path, known=_KINDS)
    sampler: BudgetSampler = build(_KINDS[kind], kind, cfg, path=path)
    return sampler
