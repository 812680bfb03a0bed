"""Budget validation: every invalid value fails at construction, naming the field."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import budgetmix
import pytest
from budgetmix import DIMENSIONS, Budget, ConfigError

INT_FIELDS = ("turns", "tool_calls", "input_tokens", "output_tokens", "total_tokens")
FLOAT_FIELDS = ("cost_usd", "wall_seconds")
BAD_FOR_ALL: tuple[Any, ...] = (0, -1, -0.5, math.nan, math.inf, -math.inf, True, False, "3", [3])


def _kwargs(field: str, value: Any) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"turns": 5}
    kwargs[field] = value
    return kwargs


@pytest.mark.parametrize("field", DIMENSIONS)
@pytest.mark.parametrize("value", BAD_FOR_ALL, ids=repr)
def test_invalid_value_names_the_field(field: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=rf"Budget\.{field}\b"):
        Budget(**_kwargs(field, value))


@pytest.mark.parametrize("field", DIMENSIONS)
@pytest.mark.parametrize("value", BAD_FOR_ALL, ids=repr)
def test_from_dict_rejects_the_same_values(field: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=rf"Budget\.{field}\b"):
        Budget.from_dict(_kwargs(field, value))


@pytest.mark.parametrize("field", INT_FIELDS)
def test_float_for_an_integer_field(field: str) -> None:
    with pytest.raises(ConfigError, match=rf"Budget\.{field} must be an integer"):
        Budget(**_kwargs(field, 2.0))


def test_missing_turns() -> None:
    with pytest.raises(ConfigError, match=r"Budget\.turns is required"):
        Budget.from_dict({"tool_calls": 3})
    with pytest.raises(ConfigError, match=r"Budget\.turns is required"):
        Budget(turns=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Budget()  # type: ignore[call-arg]


def test_unknown_key_in_from_dict_is_named() -> None:
    with pytest.raises(ConfigError, match="max_turns"):
        Budget.from_dict({"turns": 3, "max_turns": 4})


def test_config_error_is_a_value_error() -> None:
    assert issubclass(ConfigError, ValueError)
    assert issubclass(ConfigError, budgetmix.BudgetmixError)


@pytest.mark.parametrize("field", FLOAT_FIELDS)
def test_float_fields_accept_floats_and_ints(field: str) -> None:
    assert getattr(Budget(**_kwargs(field, 0.25)), field) == 0.25
    assert getattr(Budget(**_kwargs(field, 2)), field) == 2


def test_round_trip_and_helpers() -> None:
    b = Budget(turns=4, tool_calls=9, cost_usd=1.5, wall_seconds=30)
    assert Budget.from_dict(b.to_dict()) == b
    assert b.to_dict() == {"turns": 4, "tool_calls": 9, "cost_usd": 1.5, "wall_seconds": 30}
    assert list(b.limits()) == list(DIMENSIONS)
    assert replace(b, turns=7).turns == 7 and replace(b, turns=7).tool_calls == 9
    with pytest.raises(ConfigError, match=r"Budget\.turns"):
        replace(b, turns=0)
    with pytest.raises(AttributeError):
        b.turns = 3  # type: ignore[misc]
