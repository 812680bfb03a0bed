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
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from budgetmix import semconv as sc
from budgetmix._validate import check_bool, check_choice, check_keys, check_names, check_str

__all__ = [
    "CHARS_PER_TOKEN_ESTIMATE",
    "DEFAULT_ACCOUNTING",
    "TURN_UNITS",
    "AccountingPolicy",
    "estimate_tokens",
]

#: Characters per token of the estimate charged when a provider reports a usage value
#: that is no count (NaN, an infinity, negative, a fraction, a bool, a string, 2**53 or
#: more): generous for English text with GPT and Claude tokenizers, so the budget binds.
CHARS_PER_TOKEN_ESTIMATE = 4


def estimate_tokens(chars: int) -> int:
    """The tokens charged for ``chars`` characters whose usage the provider did not give
    as a count: ``ceil(chars / CHARS_PER_TOKEN_ESTIMATE)``, at least 1."""
    return max(1, -(-chars // CHARS_PER_TOKEN_ESTIMATE))


TurnUnit = Literal["response", "tool_call"]
#: Every turn unit, default first.
TURN_UNITS: tuple[TurnUnit, ...] = ("response", "tool_call")
_FLAGS = ("count_retries", "count_failed_requests", "count_failed_tool_calls")


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
        check_str("AccountingPolicy.name", self.name, empty=False)
        for flag in _FLAGS:
            check_bool(f"AccountingPolicy.{flag}", getattr(self, flag))
        check_choice("AccountingPolicy.turn_unit", self.turn_unit, TURN_UNITS)
        tools = check_names("AccountingPolicy.refunded_tools", self.refunded_tools)
        object.__setattr__(self, "refunded_tools", tools)

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
            sc.BM_ACCOUNTING_POLICY: self.name,
            sc.BM_ACCOUNTING_TURN_UNIT: self.turn_unit,
            sc.BM_ACCOUNTING_COUNT_RETRIES: self.count_retries,
            sc.BM_ACCOUNTING_COUNT_FAILED_REQUESTS: self.count_failed_requests,
            sc.BM_ACCOUNTING_COUNT_FAILED_TOOL_CALLS: self.count_failed_tool_calls,
            sc.BM_ACCOUNTING_REFUNDED_TOOLS: ",".join(sorted(self.refunded_tools)),
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
        """Inverse of :meth:`to_dict`; unknown keys are an error.

        Raises:
            ConfigError: an unknown key, or a value :class:`AccountingPolicy` refuses.
        """
        check_keys("AccountingPolicy", data, (f.name for f in fields(cls)))
        return cls(**data)


#: The rules in the module docstring.
DEFAULT_ACCOUNTING = AccountingPolicy()
