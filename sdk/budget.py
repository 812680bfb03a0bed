"""Budget: the frozen, validated limits an episode runs under."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

from budgetmix.exceptions import ConfigError

__all__ = ["DIMENSIONS", "Budget"]

#: Every dimension a ledger counts, in the order notices and traces list them.
DIMENSIONS: tuple[str, ...] = (
    "turns",
    "tool_calls",
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "cost_usd",
    "wall_seconds",
)
_INTEGRAL = frozenset({"turns", "tool_calls", "input_tokens", "output_tokens", "total_tokens"})


def _check(name: str, value: Any, *, required: bool) -> None:
    if value is None:
        if required:
            raise ConfigError(f"Budget.{name} is required")
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"Budget.{name} must be a number, got {type(value).__name__}")
    if name in _INTEGRAL and not isinstance(value, int):
        raise ConfigError(f"Budget.{name} must be an integer, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"Budget.{name} must be finite, got {value!r}")
    if value <= 0:
        raise ConfigError(f"Budget.{name} must be positive, got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Budget:
    """Limits per dimension; ``turns`` is required, every other limit is optional.

    A turn is one model response (see :class:`~budgetmix.AccountingPolicy`).

    Raises:
        ConfigError: a value is zero, negative, NaN, infinite or of the wrong type;
            the message names the field.
    """

    turns: int
    tool_calls: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    cost_usd: float | None = None
    wall_seconds: float | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            _check(f.name, getattr(self, f.name), required=f.name == "turns")

    def limits(self) -> dict[str, float | None]:
        """Limit per dimension (``None`` = unlimited), in :data:`DIMENSIONS` order."""
        return {name: getattr(self, name) for name in DIMENSIONS}

    def with_turns(self, turns: int) -> Budget:
        """A copy with another turn limit (used by budget samplers)."""
        return replace(self, turns=turns)

    def to_dict(self) -> dict[str, float]:
        """The set limits only, for configs and logs."""
        return {k: v for k, v in self.limits().items() if v is not None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Budget:
        """Build from a mapping; unknown keys are an error naming the key."""
        unknown = set(data) - set(DIMENSIONS)
        if unknown:
            raise ConfigError(f"unknown Budget field(s): {', '.join(sorted(unknown))}")
        if "turns" not in data:
            raise ConfigError("Budget.turns is required")
        return cls(**data)
