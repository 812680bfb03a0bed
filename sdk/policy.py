"""The decision seams the controller consults, the rules that fill them, and the default.

The controller asks three questions, each a protocol here: whether this turn
carries a notice (:class:`NoticePolicy`), what to grant when a limit refuses a turn
(:class:`ExtensionPolicy`), and whether to stop early (:class:`EarlyStopPolicy`).
Any object with the method will do.

The rules of :mod:`budgetmix.policies` implement them on one base, :class:`Rule`:
a frozen dataclass with a config form (:meth:`Rule.to_config`) that composes with
``|`` into :class:`AnyOf`, the one any-of combinator of every family. The default
notice rule, :class:`NotifyEveryTurn`, lives here because the controller uses it
when nothing is configured: a notice every turn in format ``v1``, exhaustion ends
the episode, no extensions, no early stop.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, fields
from enum import Enum
from typing import Any, ClassVar, Generic, Literal, Protocol, TypeVar, cast, runtime_checkable

from budgetmix._validate import check_choice, shown
from budgetmix.events import Mistake
from budgetmix.exceptions import ConfigError
from budgetmix.ledger import LedgerState
from budgetmix.notice import (
    DEFAULT_NOTICE_FORMAT,
    DEFAULT_NOTICE_PLACEMENT,
    NOTICE_FORMATS,
    NOTICE_PLACEMENTS,
    NoticePlacement,
)

__all__ = [
    "EXHAUSTION_MODES",
    "AnyOf",
    "EarlyStopPolicy",
    "EarlyStopRule",
    "EpisodeView",
    "ExhaustionMode",
    "ExtensionPolicy",
    "ExtensionRule",
    "NoticePolicy",
    "NoticeRule",
    "NotifyEveryTurn",
    "Rule",
    "StepRecord",
    "notice_placement",
]

ExhaustionMode = Literal["end", "raise", "grace"]
#: Every exhaustion mode the controller accepts, default first.
EXHAUSTION_MODES: tuple[ExhaustionMode, ...] = ("end", "raise", "grace")


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One step (tool call or environment action) as policies see it."""

    turn: int
    ok: bool
    progress: bool = False
    mistake: str | None = None


class EpisodeView(Protocol):
    """Read-only view of an episode, the only thing policies see."""

    @property
    def state(self) -> LedgerState:
        """The ledger's counts and limits now."""
        ...

    @property
    def mistakes(self) -> Sequence[Mistake]:
        """Every mistake recorded so far, in order."""
        ...

    @property
    def steps(self) -> Sequence[StepRecord]:
        """Every step recorded so far, in order."""
        ...

    @property
    def grants(self) -> int:
        """How many grants raised the episode's limits so far, from any policy."""
        ...


@runtime_checkable
class NoticePolicy(Protocol):
    """Decides whether the model sees a notice this turn, in which format, and where.

    ``placement`` is read through :func:`notice_placement`, so a policy written
    before placements existed (no such attribute) still means ``"ephemeral"``.
    """

    @property
    def format(self) -> str:
        """The registered notice format id (:data:`budgetmix.NOTICE_FORMATS`)."""
        ...

    @property
    def placement(self) -> NoticePlacement:
        """Where the notice goes (:data:`budgetmix.notice.NoticePlacement`): a message of its
        own for one request (``"ephemeral"``) or into the latest observation, kept
        (``"observation"``, what training uses)."""
        ...

    def should_notify(self, state: LedgerState) -> bool:
        """Whether the turn in progress carries a notice."""
        ...


def notice_placement(policy: object) -> NoticePlacement:
    """The placement ``policy`` asks for: its ``placement``, ``"ephemeral"`` when it has none
    (the one reader the controller, the loop and the trainer use).

    Raises:
        ConfigError: the policy names a placement that does not exist.
    """
    value = getattr(policy, "placement", DEFAULT_NOTICE_PLACEMENT)
    return check_choice(f"{type(policy).__name__}.placement", value, NOTICE_PLACEMENTS)


@runtime_checkable
class ExtensionPolicy(Protocol):
    """Asked when a limit refuses a turn; returns amounts to grant, or ``None``."""

    def on_limit(self, view: EpisodeView, dimension: str) -> dict[str, float] | None:
        """Amounts to grant per dimension now that ``dimension`` refused a turn, or ``None``."""
        ...


@runtime_checkable
class EarlyStopPolicy(Protocol):
    """Asked after every step; returns a reason to stop the episode, or ``None``."""

    def check(self, view: EpisodeView) -> str | None:
        """The reason to stop the episode now, or ``None`` to go on."""
        ...


F = TypeVar("F", bound="Rule[Any]")


class Rule(ABC, Generic[F]):
    """Base of every policy rule; ``F`` is its family (:class:`NoticeRule`,
    :class:`ExtensionRule` or :class:`EarlyStopRule`).

    A rule is a frozen dataclass whose fields are its config: ``config_kind`` names
    it in configs and :meth:`to_config` writes it out. Rules of one family compose
    with ``|`` into :class:`AnyOf` (tenacity's ``stop_a | stop_b``).
    """

    __slots__ = ()
    #: The rule's ``"kind"`` in configs (``"at_most"``, ``"no_progress"``, ...).
    config_kind: ClassVar[str]
    #: What a rule of the family is called in messages (``"notice rule"``).
    family_name: ClassVar[str] = "policy rule"
    _family: ClassVar[type[Rule[Any]]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if Rule in cls.__bases__:  # a family base: NoticeRule, ExtensionRule, ...
            cls._family = cls

    def family(self) -> type[Rule[Any]]:
        """The family base this rule belongs to."""
        return self._family

    def to_config(self) -> dict[str, Any]:
        """The rule as a config mapping (its kind and every set field); the family's
        ``*_from_config`` inverts it."""
        config: dict[str, Any] = {"kind": self.config_kind}
        for f in fields(self):  # type: ignore[arg-type]  # every concrete rule is a dataclass
            value = getattr(self, f.name)
            if f.init and value is not None:
                config[f.name] = value.value if isinstance(value, Enum) else value
        return config

    def __or__(self, other: Rule[F]) -> AnyOf[F]:
        """Either rule: :class:`AnyOf` both (the first that answers wins).

        Raises:
            ConfigError: the rules are of different families (or formats).
        """
        if not isinstance(other, Rule):
            return NotImplemented
        return AnyOf(cast("tuple[F, ...]", (self, other)))


class NoticeRule(Rule["NoticeRule"]):
    """Base of the notice rules: a :class:`NoticePolicy` that composes.

    Every rule has a ``format`` and a ``placement`` (``"ephemeral"`` by default;
    ``"observation"`` for models trained with budgetmix, see docs/layout.md).

    Raises:
        ConfigError: ``format`` is not a registered notice format, or ``placement``
            not a placement (on construction).
    """

    __slots__ = ()
    family_name = "notice rule"
    format: str
    placement: NoticePlacement

    def __post_init__(self) -> None:
        check_choice(f"{type(self).__name__}.format", self.format, sorted(NOTICE_FORMATS))
        check_choice(f"{type(self).__name__}.placement", self.placement, NOTICE_PLACEMENTS)

    @abstractmethod
    def should_notify(self, state: LedgerState) -> bool:
        """Whether the turn in progress (``state.in_turn``) carries a notice."""


class ExtensionRule(Rule["ExtensionRule"]):
    """Base of the extension rules: an :class:`ExtensionPolicy` that composes."""

    __slots__ = ()
    family_name = "extension rule"

    @abstractmethod
    def on_limit(self, view: EpisodeView, dimension: str) -> dict[str, float] | None:
        """Amounts to grant now that ``dimension`` refused a turn, or ``None``."""


class EarlyStopRule(Rule["EarlyStopRule"]):
    """Base of the early-stop rules: an :class:`EarlyStopPolicy` that composes."""

    __slots__ = ()
    family_name = "early-stop rule"

    @abstractmethod
    def check(self, view: EpisodeView) -> str | None:
        """The reason to stop the episode now, or ``None`` to go on."""


@dataclass(frozen=True, slots=True)
class AnyOf(Rule[F]):
    """Any of ``rules``, asked in order; built by ``rule_a | rule_b``.

    A notice when any rule wants one (all must use one format and one placement),
    the first grant, the first reason to stop. Nested :class:`AnyOf` members are
    flattened.

    Raises:
        ConfigError: no rules, a member that is not a rule, rules of different
            families, or notice rules with different formats or placements.
    """

    rules: tuple[F, ...]
    config_kind: ClassVar[str] = "any"

    def __post_init__(self) -> None:
        flat: list[Any] = []
        for rule in tuple(self.rules):
            if not isinstance(rule, Rule):
                raise ConfigError(f"AnyOf.rules must be policy rules, got {shown(rule)}")
            flat.extend(rule.rules if isinstance(rule, AnyOf) else (rule,))
        if not flat:
            raise ConfigError("AnyOf.rules must not be empty")
        family = flat[0].family()
        for rule in flat:
            if rule.family() is not family:
                raise ConfigError(
                    f"AnyOf.rules must all be {family.family_name}s, got {shown(rule)}"
                )
        if family is NoticeRule:
            formats = sorted({rule.format for rule in flat})
            if len(formats) > 1:
                raise ConfigError(f"AnyOf.rules mix notice formats: {', '.join(formats)}")
            places = sorted({rule.placement for rule in flat})
            if len(places) > 1:
                raise ConfigError(f"AnyOf.rules mix notice placements: {', '.join(places)}")
        object.__setattr__(self, "rules", tuple(flat))

    def family(self) -> type[Rule[Any]]:
        """The family of the members."""
        return self.rules[0].family()

    @property
    def format(self: AnyOf[NoticeRule]) -> str:
        """The notice format every member uses."""
        return self.rules[0].format

    @property
    def placement(self: AnyOf[NoticeRule]) -> NoticePlacement:
        """The notice placement every member uses."""
        return self.rules[0].placement

    def should_notify(self: AnyOf[NoticeRule], state: LedgerState) -> bool:
        """Whether any member notifies on this turn."""
        return any(rule.should_notify(state) for rule in self.rules)

    def on_limit(
        self: AnyOf[ExtensionRule], view: EpisodeView, dimension: str
    ) -> dict[str, float] | None:
        """The first member's grant."""
        for rule in self.rules:  # a plain loop: this runs at every refusal
            if grant := rule.on_limit(view, dimension):
                return grant
        return None

    def check(self: AnyOf[EarlyStopRule], view: EpisodeView) -> str | None:
        """The first member's reason to stop."""
        for rule in self.rules:  # a plain loop: this runs after every step
            if reason := rule.check(view):
                return reason
        return None

    def to_config(self) -> dict[str, Any]:
        """``{"kind": "any", "of": [<each member's config>]}``."""
        return {"kind": "any", "of": [rule.to_config() for rule in self.rules]}


@dataclass(frozen=True, slots=True)
class NotifyEveryTurn(NoticeRule):
    """A notice on every turn: the controller's default, and what training uses."""

    format: str = DEFAULT_NOTICE_FORMAT
    placement: NoticePlacement = DEFAULT_NOTICE_PLACEMENT
    config_kind: ClassVar[str] = "every_turn"

    def should_notify(self, state: LedgerState) -> bool:
        """Always."""
        return True
