"""Exhaustion: what happens when a limit refuses a turn.

The controller takes the mode as a string (``BudgetController(exhaustion=...)``):

- ``"end"`` (default): the episode ends with status ``budget_exhausted``;
- ``"raise"``: :class:`budgetmix.BudgetExhausted` (with counts and the partial
  transcript) leaves the episode's ``with`` block;
- ``"grace"``: one more, tool-less wrap-up turn (it always carries a notice),
  then the episode ends with status ``budget_exhausted``.
"""

from __future__ import annotations

from typing import Any

from budgetmix._validate import check_choice
from budgetmix.policy import EXHAUSTION_MODES, ExhaustionMode

__all__ = ["DEFAULT_EXHAUSTION", "EXHAUSTION_MODES", "exhaustion_from_config"]

DEFAULT_EXHAUSTION: ExhaustionMode = "end"


def exhaustion_from_config(value: Any, *, path: str = "exhaustion") -> ExhaustionMode:
    """Validate an exhaustion mode from a config (``None`` gives ``"end"``).

    Raises:
        ConfigError: not one of :data:`EXHAUSTION_MODES`; names the field.
    """
    if value is None:
        return DEFAULT_EXHAUSTION
    return check_choice(path, value, EXHAUSTION_MODES)
