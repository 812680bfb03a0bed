"""Budget: the frozen, validated limits an episode runs under."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from budgetmix._validate import MAX_COUNT, check_int, check_keys, check_mapping, check_number
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


def check_limit(field: str, dimension: str, value: Any) -> float:
    """A limit or grant for ``dimension``: positive and at most its maximum; an int for
    the count dimensions, a float for ``cost_usd`` and ``wall_seconds``."""
    if dimension in _INTEGRAL:
        return check_int(field, value, minimum=1, maximum=MAX_COUNT)
    return check_number(field, value, maximum=_MAXIMUM[dimension], positive=True)


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

    def to_dict(self) -> dict[str, float]:
        """The set limits only, for configs and logs."""
        return {k: v for k, v in self.limits().items() if v is not None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Budget:
        """Build from a mapping; unknown keys are an error naming the key."""
        check_keys("Budget", check_mapping("Budget.from_dict", data), DIMENSIONS)
        if "turns" not in data:
            raise ConfigError("Budget.turns is required")
        return cls(**data)
