"""The accounting policy: the one declared place that says what counts as what.

The default rules (published in the README and on every episode span):

=========================================  ==================================
event                                      charge
=========================================  ==================================
one model response                         1 turn, whatever its tool calls
each tool call of a (parallel) batch       1 tool call; the batch is
                                           pre-checked as a whole
a retry of a transient provider error      no turn (wall time still runs)
a request that failed after all retries    no turn
a failed tool call                         1 tool call
=========================================  ==================================
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from budgetmix.exceptions import ConfigError

__all__ = ["DEFAULT_ACCOUNTING", "AccountingPolicy", "check_call_ids", "check_tool_names"]

TurnUnit = Literal["response", "tool_call"]
_FLAGS = ("count_retries", "count_failed_requests", "count_failed_tool_calls")


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


def _tool_set(tools: Any) -> frozenset[str]:
    field = "AccountingPolicy.refunded_tools"
    if isinstance(tools, str | bytes) or not isinstance(tools, Iterable):
        raise ConfigError(f"{field} must be a set of tool names, got {type(tools).__name__}")
    try:
        names = tools if isinstance(tools, frozenset) else frozenset(tools)
    except TypeError:  # an unhashable member
        raise ConfigError(f"{field} must hold tool names (str)") from None
    if not all(isinstance(t, str) for t in names):
        raise ConfigError(f"{field} must hold tool names (str)")
    return names


@dataclass(frozen=True, slots=True, kw_only=True)
class AccountingPolicy:
    """How model responses, tool calls, retries and failures are charged.

    Raises:
        ConfigError: a field of the wrong type or value (the flags must be bools,
            ``refunded_tools`` a collection of names but not a bare string); the message
            names the field.

    Attributes:
        name: label exported on traces (``budgetmix.accounting.policy``).
        turn_unit: ``"response"`` charges one turn per model response;
            ``"tool_call"`` additionally charges one turn per tool call beyond
            the first in a parallel batch.
        count_retries: charge a turn for every retry of a transient provider error.
        count_failed_requests: charge the turn of a request that failed after retries.
        count_failed_tool_calls: a tool call that raised still costs a tool call.
        refunded_tools: tool names whose calls never cost a tool call.
    """

    name: str = "default"
    turn_unit: TurnUnit = "response"
    count_retries: bool = False
    count_failed_requests: bool = False
    count_failed_tool_calls: bool = True
    refunded_tools: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise ConfigError(
                f"AccountingPolicy.name must be a str, got {type(self.name).__name__}"
            )
        for flag in _FLAGS:
            if not isinstance(getattr(self, flag), bool):
                raise ConfigError(
                    f"AccountingPolicy.{flag} must be true or false, got {getattr(self, flag)!r}"
                )
        if self.turn_unit not in ("response", "tool_call"):
            raise ConfigError(
                f"AccountingPolicy.turn_unit must be 'response' or 'tool_call', "
                f"got {self.turn_unit!r}"
            )
        object.__setattr__(self, "refunded_tools", _tool_set(self.refunded_tools))

    def tool_calls_for_batch(self, names: Sequence[str]) -> int:
        """Tool calls a batch costs (refunded tools are free)."""
        return sum(1 for n in names if n not in self.refunded_tools)

    def extra_turns_for_batch(self, names: Sequence[str]) -> int:
        """Turns a batch costs beyond the response's own turn."""
        if self.turn_unit == "tool_call":
            return max(0, len(names) - 1)
        return 0

    def as_attributes(self) -> dict[str, str | bool]:
        """The policy as span attributes under ``budgetmix.accounting.*``."""
        return {
            "budgetmix.accounting.policy": self.name,
            "budgetmix.accounting.turn_unit": self.turn_unit,
            "budgetmix.accounting.count_retries": self.count_retries,
            "budgetmix.accounting.count_failed_requests": self.count_failed_requests,
            "budgetmix.accounting.count_failed_tool_calls": self.count_failed_tool_calls,
            "budgetmix.accounting.refunded_tools": ",".join(sorted(self.refunded_tools)),
        }

    def to_dict(self) -> dict[str, Any]:
        """Serialisable form (configs, results files)."""
        return {
            "name": self.name,
            "turn_unit": self.turn_unit,
            "count_retries": self.count_retries,
            "count_failed_requests": self.count_failed_requests,
            "count_failed_tool_calls": self.count_failed_tool_calls,
            "refunded_tools": sorted(self.refunded_tools),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AccountingPolicy:
        """Inverse of :meth:`to_dict`; unknown keys are an error."""
        known = {
            "name",
            "turn_unit",
            "count_retries",
            "count_failed_requests",
            "count_failed_tool_calls",
            "refunded_tools",
        }
        unknown = set(data) - known
        if unknown:
            raise ConfigError(f"unknown AccountingPolicy field(s): {', '.join(sorted(unknown))}")
        kwargs = dict(data)
        if "refunded_tools" in kwargs:
            kwargs["refunded_tools"] = frozenset(kwargs["refunded_tools"])
        return cls(**kwargs)


#: The rules in the module docstring.
DEFAULT_ACCOUNTING = AccountingPolicy()
