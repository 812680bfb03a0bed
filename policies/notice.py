"""Notice policies: on which turns the model is told its budget, and in which format.

Each rule is a frozen object with one ``should_notify(state)`` over the ledger
state of the turn in progress; rules compose with ``|`` (notify when either
does), like tenacity's ``stop_a | stop_b``::

    NotifyWhenAtMost(turns=3) | NotifyFinalTurn()

The wording is never configured here: a rule names a registered format id of
:data:`budgetmix.NOTICE_FORMATS`, so runtime and training render the same bytes.
A grace turn always carries a notice, whatever the rule says.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from budgetmix.exceptions import ConfigError
from budgetmix.ledger import LedgerState
from budgetmix.notice import DEFAULT_NOTICE_FORMAT, NOTICE_FORMATS
from budgetmix.policies import _validate as v

__all__ = [
    "NoticeRule",
    "NotifyAny",
    "NotifyEveryTurn",
    "NotifyFinalTurn",
    "NotifyNever",
    "NotifyWhenAtMost",
    "notice_from_config",
]


def _check_format(owner: str, fmt: Any) -> None:
    if not isinstance(fmt, str) or fmt not in NOTICE_FORMATS:
        raise ConfigError(
            f"{owner}.format must be one of {', '.join(sorted(NOTICE_FORMATS))}, got {fmt!r}"
        )


class NoticeRule(ABC):
    """Base of the notice rules: a :class:`budgetmix.policy.NoticePolicy` that composes."""

    __slots__ = ()
    format: str

    @abstractmethod
    def should_notify(self, state: LedgerState) -> bool:
        """Whether the turn in progress (``state.in_turn``) carries a notice."""

    @abstractmethod
    def to_config(self) -> dict[str, Any]:
        """The rule as a config mapping; :func:`notice_from_config` inverts it."""

    def __or__(self, other: NoticeRule) -> NotifyAny:
        """Notify when either rule does (both must use the same format)."""
        if not isinstance(other, NoticeRule):
            return NotImplemented
        left = self.rules if isinstance(self, NotifyAny) else (self,)
        right = other.rules if isinstance(other, NotifyAny) else (other,)
        return NotifyAny((*left, *right))


@dataclass(frozen=True, slots=True)
class NotifyEveryTurn(NoticeRule):
    """A notice on every turn: the default, and what training uses."""

    format: str = DEFAULT_NOTICE_FORMAT

    def __post_init__(self) -> None:
        _check_format("NotifyEveryTurn", self.format)

    def should_notify(self, state: LedgerState) -> bool:
        return True

    def to_config(self) -> dict[str, Any]:
        return {"kind": "every_turn", "format": self.format}


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

    def __post_init__(self) -> None:
        if self.turns is None and self.fraction is None:
            raise ConfigError("NotifyWhenAtMost needs turns or fraction")
        if self.turns is not None:
            v.positive_int("NotifyWhenAtMost.turns", self.turns)
        if self.fraction is not None:
            object.__setattr__(
                self, "fraction", v.unit_fraction("NotifyWhenAtMost.fraction", self.fraction)
            )
        _check_format("NotifyWhenAtMost", self.format)

    def should_notify(self, state: LedgerState) -> bool:
        left = state.turns_remaining
        if self.turns is not None and left <= self.turns:
            return True
        # same rounding as the controller's warn_fraction: never below the final turn
        return self.fraction is not None and state.in_last_share(self.fraction)

    def to_config(self) -> dict[str, Any]:
        cfg: dict[str, Any] = {"kind": "at_most"}
        if self.turns is not None:
            cfg["turns"] = self.turns
        if self.fraction is not None:
            cfg["fraction"] = self.fraction
        cfg["format"] = self.format
        return cfg


@dataclass(frozen=True, slots=True)
class NotifyFinalTurn(NoticeRule):
    """A notice on the final turn only."""

    format: str = DEFAULT_NOTICE_FORMAT

    def __post_init__(self) -> None:
        _check_format("NotifyFinalTurn", self.format)

    def should_notify(self, state: LedgerState) -> bool:
        return state.is_final_turn

    def to_config(self) -> dict[str, Any]:
        return {"kind": "final_turn", "format": self.format}


@dataclass(frozen=True, slots=True)
class NotifyNever(NoticeRule):
    """No notice on ordinary turns (ablations); ``format`` still renders a grace turn."""

    format: str = DEFAULT_NOTICE_FORMAT

    def __post_init__(self) -> None:
        _check_format("NotifyNever", self.format)

    def should_notify(self, state: LedgerState) -> bool:
        return False

    def to_config(self) -> dict[str, Any]:
        return {"kind": "off", "format": self.format}


@dataclass(frozen=True, slots=True)
class NotifyAny(NoticeRule):
    """Notify when any of ``rules`` does; built by ``rule_a | rule_b``.

    Raises:
        ConfigError: no rules, or rules with different formats.
    """

    rules: tuple[NoticeRule, ...]
    format: str = field(init=False)

    def __post_init__(self) -> None:
        rules = tuple(self.rules)
        if not rules:
            raise ConfigError("NotifyAny.rules must not be empty")
        for rule in rules:
            if not isinstance(rule, NoticeRule):
                raise ConfigError(f"NotifyAny.rules must be notice rules, got {rule!r}")
        formats = sorted({r.format for r in rules})
        if len(formats) > 1:
            raise ConfigError(f"NotifyAny.rules mix notice formats: {', '.join(formats)}")
        object.__setattr__(self, "rules", rules)
        object.__setattr__(self, "format", formats[0])

    def should_notify(self, state: LedgerState) -> bool:
        return any(rule.should_notify(state) for rule in self.rules)

    def to_config(self) -> dict[str, Any]:
        return {"kind": "any", "of": [r.to_config() for r in self.rules]}


_KINDS = ("every_turn", "at_most", "final_turn", "off", "any")


def notice_from_config(
    config: Mapping[str, Any] | str | None, *, path: str = "notice"
) -> NoticeRule:
    """Build a notice rule from ``{"kind": ..., "format": ...}`` (or just the kind name).

    Kinds: ``every_turn``, ``at_most`` (``turns`` and/or ``fraction``), ``final_turn``,
    ``off``, ``any`` (``of``: a list of rule configs). ``None`` gives the default,
    :class:`NotifyEveryTurn` in format ``v1``.

    Raises:
        ConfigError: unknown kind or field, bad threshold or format; names the field.
    """
    if config is None:
        return NotifyEveryTurn()
    cfg: dict[str, Any] = {"kind": config} if isinstance(config, str) else v.mapping(path, config)
    kind = v.kind(path, cfg, _KINDS)
    if kind == "any":
        v.only_keys(path, cfg, ("of",))
        items = v.sequence_of_mappings(f"{path}.of", cfg.get("of"))
        return NotifyAny(
            tuple(notice_from_config(c, path=f"{path}.of[{i}]") for i, c in enumerate(items))
        )
    fmt = cfg.pop("format", DEFAULT_NOTICE_FORMAT)
    _check_format(path, fmt)
    if kind == "at_most":
        v.only_keys(path, cfg, ("turns", "fraction"))
        if cfg.get("turns") is None and cfg.get("fraction") is None:
            raise ConfigError(f"{path}.turns or {path}.fraction is required for kind at_most")
        if cfg.get("turns") is not None:
            v.positive_int(f"{path}.turns", cfg["turns"])
        if cfg.get("fraction") is not None:
            v.unit_fraction(f"{path}.fraction", cfg["fraction"])
        return NotifyWhenAtMost(turns=cfg.get("turns"), fraction=cfg.get("fraction"), format=fmt)
    v.only_keys(path, cfg, ())
    simple: dict[str, type[NotifyEveryTurn | NotifyFinalTurn | NotifyNever]] = {
        "every_turn": NotifyEveryTurn,
        "final_turn": NotifyFinalTurn,
        "off": NotifyNever,
    }
    return simple[kind](format=fmt)
