"""Shared validation for policy configs: every error is a ConfigError naming the field."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from budgetmix._validate import MAX_COUNT, shown
from budgetmix.exceptions import ConfigError

__all__: list[str] = []

R = TypeVar("R")


def positive_int(field: str, value: Any) -> int:
    """``value`` as an int in ``[1, MAX_COUNT]`` (2**53; bools are rejected: ``True`` is
    not a count, and a larger count could never be granted or charged)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{field} must be an integer, got {type(value).__name__}")
    if value < 1:
        raise ConfigError(f"{field} must be >= 1, got {shown(value)}")
    if value > MAX_COUNT:
        raise ConfigError(f"{field} must be at most {MAX_COUNT}, got {shown(value)}")
    return value


def unit_fraction(field: str, value: Any) -> float:
    """``value`` as a float in (0, 1]."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{field} must be a number, got {type(value).__name__}")
    # compared as is: math.isfinite() of a huge int overflows; NaN fails both tests
    if not 0.0 < value <= 1.0:
        raise ConfigError(f"{field} must lie in (0, 1], got {shown(value)}")
    return float(value)


def boolean(field: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{field} must be true or false, got {value!r}")
    return value


def mapping(field: str, value: Any) -> dict[str, Any]:
    """A shallow copy of ``value``, which must be a mapping with string keys."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"{field} must be a mapping, got {type(value).__name__}")
    out = dict(value)
    for key in out:
        if not isinstance(key, str):
            raise ConfigError(f"{field} keys must be strings, got {key!r}")
    return out


def only_keys(field: str, config: Mapping[str, Any], allowed: Iterable[str]) -> None:
    unknown = sorted(set(config) - set(allowed))
    if unknown:
        raise ConfigError(f"unknown {field} field(s): {', '.join(unknown)}")


def kind(field: str, config: dict[str, Any], known: Iterable[str]) -> str:
    """Pop and check ``config["kind"]``."""
    names = list(known)
    value = config.pop("kind", None)
    if value not in names:
        raise ConfigError(f"unknown {field}.kind {value!r}; known: {', '.join(names)}")
    assert isinstance(value, str)
    return value


def sequence_of_mappings(field: str, value: Any) -> list[Any]:
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, list | tuple):
        raise ConfigError(f"{field} must be a list, got {type(value).__name__}")
    if not value:
        raise ConfigError(f"{field} must not be empty")
    return list(value)


def any_of(path: str, config: Mapping[str, Any], build: Callable[..., R | None]) -> tuple[R, ...]:
    """The rules of an ``{"kind": "any", "of": [...]}`` config, each built with
    ``build(item, path=...)``; an ``off`` member is an error naming its place."""
    only_keys(path, config, ("of",))
    rules: list[R] = []
    for i, item in enumerate(sequence_of_mappings(f"{path}.of", config.get("of"))):
        rule = build(item, path=f"{path}.of[{i}]")
        if rule is None:
            raise ConfigError(f"{path}.of[{i}] must not be off")
        rules.append(rule)
    return tuple(rules)
