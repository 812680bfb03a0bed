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

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from budgetmix.exceptions import ConfigError

__all__ = ["DEFAULT_ACCOUNTING", "AccountingPolicy"]

TurnUnit = Literal["response", "tool_call"]


@dataclass(frozen=True, slots=True, kw_only=True)
class AccountingPolicy:
    """How model responses, tool calls, retries and failures are charged.

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
        if self.turn_unit not in ("response", "tool_call"):
            raise ConfigError(
                f"AccountingPolicy.turn_unit must be 'response' or 'tool_call', "
                f"got {self.turn_unit!r}"
            )
        if not isinstance(self.refunded_tools, frozenset):
            object.__setattr__(self, "refunded_tools", frozenset(self.refunded_tools))

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
