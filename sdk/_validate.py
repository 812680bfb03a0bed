"""The validation vocabulary: one small function per kind of check.

Every value object and config reader of budgetmix checks its fields with these,
so a bad value fails at construction with one wording, a :class:`ConfigError`
whose message starts with the field's name (``"Budget.turns must be ..."``). A
bool is never a number here: ``True`` is not a count, a price or a fraction.

Each check returns the value it accepted, normalised where that matters (an
int subclass as an int, a number as a float), so a frozen dataclass can store
what it validated::

    def __post_init__(self) -> None:
        check_int("StopWithoutProgress.turns", self.turns, minimum=1)
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

from budgetmix.exceptions import ConfigError

__all__ = [
    "MAX_COUNT",
    "check_between",
    "check_bool",
    "check_call_ids",
    "check_choice",
    "check_instance",
    "check_int",
    "check_ints",
    "check_keys",
    "check_list",
    "check_mapping",
    "check_names",
    "check_number",
    "check_str",
    "check_tool_names",
    "parse_assignments",
    "pop_kind",
    "shown",
]

T = TypeVar("T")

#: The largest count a check accepts unless told otherwise (turns, tool calls, tokens):
#: 2**53, the largest integer a float (JSON, OpenTelemetry, prices) holds exactly.
MAX_COUNT = 2**53
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


def check_int(field: str, value: Any, *, minimum: int = 0, maximum: int = MAX_COUNT) -> int:
    """``value`` as a whole number in ``[minimum, maximum]`` (a bool is not one).

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


def check_ints(field: str, values: Any, *, minimum: int = 0) -> tuple[int, ...]:
    """``values`` as a non-empty tuple of ints, each ``>= minimum`` (a bare string or a
    mapping is not a list).

    Raises:
        ConfigError: not a list, empty, or an entry that fails :func:`check_int`
            (named ``field[i]``).
    """
    items = check_list(field, values)
    return tuple(check_int(f"{field}[{i}]", v, minimum=minimum) for i, v in enumerate(items))


def _number(field: str, value: Any) -> float | int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{field} must be a number, got {type(value).__name__} {shown(value)}")
    return value


def check_number(
    field: str,
    value: Any,
    *,
    minimum: float = 0.0,
    maximum: float = math.inf,
    positive: bool = False,
) -> float:
    """``value`` as a finite float in ``[minimum, maximum]`` (above ``minimum`` when
    ``positive``).

    Raises:
        ConfigError: not a real number (a bool is not one), NaN, infinite, below the
            minimum (or at it, when ``positive``) or above ``maximum``; names ``field``.
    """
    number = _number(field, value)
    # compared before any float(): a huge int would overflow it, NaN fails every test
    if isinstance(number, float) and not math.isfinite(number):
        raise ConfigError(f"{field} must be finite, got {shown(value)}")
    if number < minimum or (positive and number == minimum):
        if minimum == 0:
            wanted = "positive" if positive else ">= 0"
        else:
            wanted = f"{'>' if positive else '>='} {minimum:g}"
        raise ConfigError(f"{field} must be {wanted}, got {shown(value)}")
    if number > maximum:
        raise ConfigError(f"{field} must be at most {maximum:g}, got {shown(value)}")
    return float(number)


def check_between(
    field: str,
    value: Any,
    low: float,
    high: float,
    *,
    open_low: bool = False,
    open_high: bool = False,
) -> float:
    """``value`` as a float in the interval from ``low`` to ``high`` (either end left out
    with ``open_low`` / ``open_high``): fractions, rates, percentiles.

    Raises:
        ConfigError: not a real number, or outside the interval (NaN is), which the
            message writes out (``"must lie in (0, 1]"``).
    """
    number = _number(field, value)
    # NaN fails both tests; an infinity lies outside any finite interval
    above = number > low if open_low else number >= low
    below = number < high if open_high else number <= high
    if not (above and below):
        interval = f"{'(' if open_low else '['}{low:g}, {high:g}{')' if open_high else ']'}"
        raise ConfigError(f"{field} must lie in {interval}, got {shown(value)}")
    return float(number)


def check_bool(field: str, value: Any) -> bool:
    """``value`` if it is ``True`` or ``False`` (not 0, 1 or ``"yes"``).

    Raises:
        ConfigError: anything else; names ``field``.
    """
    if not isinstance(value, bool):
        raise ConfigError(f"{field} must be true or false, got {shown(value)}")
    return value


def check_str(field: str, value: Any, *, empty: bool = True) -> str:
    """``value`` if it is a str (a non-empty one unless ``empty``).

    Raises:
        ConfigError: not a str, or empty when that is refused; names ``field``.
    """
    if not isinstance(value, str):
        raise ConfigError(f"{field} must be a str, got {type(value).__name__}")
    if not empty and not value:
        raise ConfigError(f"{field} must be a non-empty string")
    return value


def check_choice(field: str, value: Any, choices: Iterable[T]) -> T:
    """The member of ``choices`` that ``value`` equals, if ``value`` is a str.

    Raises:
        ConfigError: not one of ``choices``; the message lists them.
    """
    options = list(choices)
    if isinstance(value, str):
        for option in options:
            if option == value:
                return option
    listed = ", ".join(repr(o) for o in options)
    raise ConfigError(f"{field} must be one of {listed}, got {shown(value)}")


def check_instance(field: str, value: Any, kind: type | Any, wanted: str) -> Any:
    """``value`` if it is an instance of ``kind`` (a type or a union of types).

    Raises:
        ConfigError: ``"<field> must be <wanted>, got <type>"``.
    """
    if not isinstance(value, kind):
        raise ConfigError(f"{field} must be {wanted}, got {type(value).__name__}")
    return value


def check_mapping(field: str, value: Any) -> dict[str, Any]:
    """A shallow copy of ``value``, which must be a mapping with string keys.

    Raises:
        ConfigError: not a mapping, or a key that is not a str; names ``field``.
    """
    if not isinstance(value, Mapping):
        raise ConfigError(f"{field} must be a mapping, got {type(value).__name__}")
    out = dict(value)
    for key in out:
        if not isinstance(key, str):
            raise ConfigError(f"{field} keys must be strings, got {shown(key)}")
    return out


def check_keys(field: str, config: Iterable[str], allowed: Iterable[str]) -> None:
    """Refuse the keys of ``config`` that are not ``allowed``.

    Raises:
        ConfigError: ``"unknown <field> field(s): a, b"``.
    """
    unknown = sorted(set(config) - set(allowed))
    if unknown:
        raise ConfigError(f"unknown {field} field(s): {', '.join(unknown)}")


def check_list(field: str, value: Any) -> list[Any]:
    """``value`` as a non-empty list (a list or tuple; a string or mapping is not one).

    Raises:
        ConfigError: not a list, or empty; names ``field``.
    """
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, list | tuple):
        raise ConfigError(f"{field} must be a list, got {type(value).__name__}")
    if not value:
        raise ConfigError(f"{field} must not be empty")
    return list(value)


def pop_kind(field: str, config: dict[str, Any], known: Iterable[str]) -> str:
    """Pop and check ``config["kind"]`` of a ``{"kind": ..., <fields>}`` config.

    Raises:
        ConfigError: a missing or unknown kind; the message lists the known ones.
    """
    names = list(known)
    value = config.pop("kind", None)
    if not isinstance(value, str) or value not in names:
        raise ConfigError(f"unknown {field}.kind {shown(value)}; known: {', '.join(names)}")
    return value


def check_names(field: str, names: Any) -> frozenset[str]:
    """``names`` as a frozenset of non-empty strings (tool names, say); a list, tuple or
    set of them, not a bare string, which would be read as its characters.

    Raises:
        ConfigError: not such a collection, or a member that is not a non-empty str.
    """
    if isinstance(names, str | bytes | Mapping) or not isinstance(names, Iterable):
        raise ConfigError(f"{field} must be a list of names, got {type(names).__name__}")
    members = list(names)
    for name in members:
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{field} entries must be non-empty strings, got {shown(name)}")
    return names if isinstance(names, frozenset) else frozenset(members)


def check_tool_names(field: str, names: Any) -> Sequence[str]:
    """``names`` if it is a sequence of tool names (a bare string is not: it would be
    read as one call per character).

    Raises:
        ConfigError: not a list or tuple of strings; the message names ``field``.
    """
    # a list or tuple first: the ABC check costs more, and this runs every tool batch
    if not isinstance(names, list | tuple) and (
        isinstance(names, str | bytes) or not isinstance(names, Sequence)
    ):
        raise ConfigError(f"{field} must be a list of tool names, got {type(names).__name__}")
    for i, name in enumerate(names):
        if not isinstance(name, str):
            raise ConfigError(f"{field}[{i}] must be a str, got {type(name).__name__}")
    return names


def check_call_ids(names: Sequence[str], call_ids: Any) -> Sequence[str | None]:
    """One call id (a str, or ``None``) per tool name; all ``None`` when not given.

    Raises:
        ConfigError: ``call_ids`` is not a list of that length of strings or ``None``.
    """
    if call_ids is None:
        return [None] * len(names)
    if not isinstance(call_ids, list | tuple) and (
        isinstance(call_ids, str | bytes) or not isinstance(call_ids, Sequence)
    ):
        raise ConfigError(f"call_ids must be a list, got {type(call_ids).__name__}")
    if len(call_ids) != len(names):
        raise ConfigError("call_ids must have one entry per tool name")
    for i, cid in enumerate(call_ids):
        if cid is not None and not isinstance(cid, str):
            raise ConfigError(f"call_ids[{i}] must be a str or None, got {type(cid).__name__}")
    return call_ids


def parse_assignments(flag: str, pairs: Iterable[str]) -> dict[str, Any]:
    """``FIELD=VALUE`` pairs (a command's ``--set`` flags) as a dict of overrides.

    Each VALUE is JSON; text that is not JSON is a string (``name=abc``). A later
    pair for the same field wins.

    Raises:
        ConfigError: a pair without ``=`` or with an empty field name; the message
            starts with ``flag``.
    """
    found: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"{flag}: expected FIELD=VALUE, got {pair!r}")
        try:
            found[key] = json.loads(raw)
        except (ValueError, RecursionError):
            found[key] = raw
    return found
