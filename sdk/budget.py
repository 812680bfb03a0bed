"""Budget: the frozen, validated limits an episode runs under."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from budgetmix.exceptions import ConfigError

__all__ = ["DIMENSIONS", "MAX_COST_USD", "MAX_COUNT", "MAX_WALL_SECONDS", "Budget"]

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
#: The largest limit, grant or single charge of a count dimension (turns, tool calls,
#: tokens): 2**53, the largest integer a float (JSON, OpenTelemetry, prices) holds exactly.
MAX_COUNT = 2**53
#: The largest cost limit, grant or single charge, in US dollars.
MAX_COST_USD = 1e12
#: The largest wall-clock limit or grant, in seconds (about 31 years).
MAX_WALL_SECONDS = 1e9
_INTEGRAL = frozenset({"turns", "tool_calls", "input_tokens", "output_tokens", "total_tokens"})
_MAXIMUM: dict[str, float] = {
    **dict.fromkeys(_INTEGRAL, MAX_COUNT),
    "cost_usd": MAX_COST_USD,
    "wall_seconds": MAX_WALL_SECONDS,
}
_SHOWN_MAX_BITS = 128


def shown(value: Any) -> str:
    """``repr(value)`` for an error message, short and never raising (an int too long
    for ``str()``, an object whose ``__repr__`` raises)."""
    if isinstance(value, int) and value.bit_length() > _SHOWN_MAX_BITS:
        return f"an integer of {value.bit_length()} bits"
    try:
        text = repr(value)
    except Exception:
        return f"<unprintable {type(value).__name__}>"
    return text if len(text) <= 80 else text[:77] + "..."


def check_count(field: str, value: Any, *, minimum: int = 0, maximum: int = MAX_COUNT) -> int:
    """``value`` as a whole count in ``[minimum, maximum]`` (a bool is not a count).

    Raises:
        ConfigError: not an int, or out of range; the message names ``field``.
    """
    if type(value) is int and minimum <= value <= maximum:  # the hot path: one check
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{field} must be an integer, got {type(value).__name__} {shown(value)}")
    if value < minimum:
        raise ConfigError(f"{field} must be at least {minimum}, got {shown(value)}")
    if value > maximum:
        raise ConfigError(f"{field} must be at most {maximum}, got {shown(value)}")
    return int(value)  # an int subclass (an IntEnum, say) counts as its value


def check_amount(field: str, value: Any, *, maximum: float, positive: bool = False) -> float:
    """``value`` as a finite float in ``[0, maximum]`` (``(0, maximum]`` if ``positive``).

    Raises:
        ConfigError: not a real number (a bool is not one), NaN, infinite, negative
            (or zero when ``positive``) or above ``maximum``; the message names ``field``.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{field} must be a number, got {type(value).__name__} {shown(value)}")
    # compared before any float(): a huge int would overflow it, NaN fails every test
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{field} must be finite, got {shown(value)}")
    if value < 0 or (positive and value == 0):
        sign = "positive" if positive else ">= 0"
        raise ConfigError(f"{field} must be {sign}, got {shown(value)}")
    if value > maximum:
        raise ConfigError(f"{field} must be at most {maximum:g}, got {shown(value)}")
    return float(value)


def check_limit(field: str, dimension: str, value: Any) -> float:
    """A limit or grant for ``dimension``: positive and at most its maximum; an int for
    the count dimensions, a float for ``cost_usd`` and ``wall_seconds``."""
    if dimension in _INTEGRAL:
        if isinstance(value, float) and not isinstance(value, bool):
            raise ConfigError(f"{field} must be an integer, got {shown(value)}")
        return check_count(field, value, minimum=1, maximum=MAX_COUNT)
    return check_amount(field, value, maximum=_MAXIMUM[dimension], positive=True)


def maximum_of(dimension: str) -> float:
    """The largest limit ``dimension`` may have (:data:`MAX_COUNT` for counts)."""
    return _MAXIMUM[dimension]


@dataclass(frozen=True, slots=True, kw_only=True)
class Budget:
    """Limits per dimension; ``turns`` is required, every other limit is optional.

    A turn is one model response (see :class:`~budgetmix.AccountingPolicy`).

    Counts (``turns``, ``tool_calls``, the token limits) are ints in
    ``[1, MAX_COUNT]`` (2**53); ``cost_usd`` lies in ``(0, MAX_COST_USD]`` (1e12) and
    ``wall_seconds`` in ``(0, MAX_WALL_SECONDS]`` (1e9), both kept as floats.

    Raises:
        ConfigError: a value is zero, negative, NaN, infinite, above its maximum or of
            the wrong type (a bool is not a number); the message names the field.
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
            value = getattr(self, f.name)
            if value is None:
                if f.name == "turns":
                    raise ConfigError("Budget.turns is required")
                continue
            # frozen: normalised in place (an IntEnum becomes an int, 2 dollars 2.0)
            object.__setattr__(self, f.name, check_limit(f"Budget.{f.name}", f.name, value))

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
        if not isinstance(data, Mapping):
            raise ConfigError(f"Budget.from_dict needs a mapping, got {type(data).__name__}")
        unknown = set(data) - set(DIMENSIONS)
        if unknown:
            raise ConfigError(f"unknown Budget field(s): {', '.join(sorted(unknown))}")
        if "turns" not in data:
            raise ConfigError("Budget.turns is required")
        return cls(**data)
