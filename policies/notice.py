"""Notice policies: on which turns the model is told its budget, and in which format.

Each rule is a frozen object with one ``should_notify(state)`` over the ledger
state of the turn in progress; rules compose with ``|`` (notify when either
does), like tenacity's ``stop_a | stop_b``::

    NotifyWhenAtMost(turns=3) | NotifyFinalTurn()

The default, :class:`~budgetmix.policy.NotifyEveryTurn`, lives in the core next to
the controller that falls back on it; this module adds the others.

The wording is never configured here: a rule names a registered format id of
:data:`budgetmix.NOTICE_FORMATS`, so runtime and training render the same bytes.
A grace turn always carries a notice, whatever the rule says.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from budgetmix._validate import check_between, check_int
from budgetmix.exceptions import ConfigError
from budgetmix.ledger import LedgerState
from budgetmix.notice import DEFAULT_NOTICE_FORMAT, DEFAULT_NOTICE_PLACEMENT, NoticePlacement
from budgetmix.policies._from_config import rule_from_config
from budgetmix.policy import NoticeRule, NotifyEveryTurn, Rule

__all__ = ["NotifyFinalTurn", "NotifyNever", "NotifyWhenAtMost", "notice_from_config"]


@dataclass(frozen=True, slots=True)
class NotifyWhenAtMost(NoticeRule):
    """A notice only once few turns remain: at most ``turns`` turns, or at most
    ``fraction`` of the turn limit (counting the turn in progress).

    ``NotifyWhenAtMost(3)`` notifies on the last three turns;
    ``NotifyWhenAtMost(fraction=0.25)`` on the last quarter (at least the final turn).
    With both set, either condition suffices. Limits raised by a grant count.

    Raises:
        ConfigError: neither threshold set, ``turns`` below 1, ``fraction`` outside (0, 1].
    """

    turns: int | None = None
    fraction: float | None = None
    format: str = DEFAULT_NOTICE_FORMAT
    placement: NoticePlacement = DEFAULT_NOTICE_PLACEMENT
    config_kind: ClassVar[str] = "at_most"

    def __post_init__(self) -> None:
        if self.turns is None and self.fraction is None:
            raise ConfigError("NotifyWhenAtMost.turns or fraction must be set")
        if self.turns is not None:
            check_int("NotifyWhenAtMost.turns", self.turns, minimum=1)
        if self.fraction is not None:
            field = "NotifyWhenAtMost.fraction"
            fraction = check_between(field, self.fraction, 0, 1, open_low=True)
            object.__setattr__(self, "fraction", fraction)
        NoticeRule.__post_init__(self)

    def should_notify(self, state: LedgerState) -> bool:
        """Whether at most ``turns`` (or ``fraction`` of the limit) remain."""
        left = state.turns_remaining
        if self.turns is not None and left <= self.turns:
            return True
        # same rounding as the controller's warn_fraction: never below the final turn
        return self.fraction is not None and state.in_last_share(self.fraction)


@dataclass(frozen=True, slots=True)
class NotifyFinalTurn(NoticeRule):
    """A notice on the final turn only."""

    format: str = DEFAULT_NOTICE_FORMAT
    placement: NoticePlacement = DEFAULT_NOTICE_PLACEMENT
    config_kind: ClassVar[str] = "final_turn"

    def should_notify(self, state: LedgerState) -> bool:
        """Whether this is the final turn."""
        return state.is_final_turn


@dataclass(frozen=True, slots=True)
class NotifyNever(NoticeRule):
    """No notice on ordinary turns (ablations); ``format`` still renders a grace turn."""

    format: str = DEFAULT_NOTICE_FORMAT
    placement: NoticePlacement = DEFAULT_NOTICE_PLACEMENT
    config_kind: ClassVar[str] = "off"

    def should_notify(self, state: LedgerState) -> bool:
        """Never."""
        return False


_KINDS = (NotifyEveryTurn, NotifyWhenAtMost, NotifyFinalTurn, NotifyNever)


def notice_from_config(
    config: Mapping[str, Any] | str | None, *, path: str = "notice"
) -> Rule[NoticeRule]:
    """Build a notice rule from ``{"kind": ..., "format": ...}`` (or just the kind name).

    Every kind takes ``placement`` (``"ephemeral"``, the default, or ``"observation"``).
    Kinds: ``every_turn``, ``at_most`` (``turns`` and/or ``fraction``), ``final_turn``,
    ``off``, ``any`` (``of``: a list of rule configs). ``None`` gives the default,
    :class:`~budgetmix.policy.NotifyEveryTurn` in format ``v1``.

    Raises:
        ConfigError: unknown kind or field, bad threshold or format; names the field.
    """
    if config is None:
        return NotifyEveryTurn()
    return rule_from_config(config, path=path, kinds=_KINDS, member=notice_from_config)
