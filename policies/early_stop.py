"""Early-stop policies: end an episode that cannot finish, and say why.

The controller asks its early-stop policy after every recorded step (tool call
result, environment step or mistake). A rule returns a reason string or
``None``; the first reason ends the episode before its next turn with status
``early_stopped`` and that reason as ``result.stop_reason``. Rules compose with
``|`` (stop when either does; the first reason wins)::

    StopOnRepeatedMistakes(3) | StopWithoutProgress(turns=4)

Reasons start with a stable token (``repeated_mistakes:``, ``no_progress:``) so
reports can group them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from budgetmix.events import MistakeKind
from budgetmix.exceptions import ConfigError
from budgetmix.policies import _validate as v
from budgetmix.policy import EpisodeView

__all__ = [
    "EarlyStopRule",
    "StopAny",
    "StopOnRepeatedMistakes",
    "StopWithoutProgress",
    "early_stop_from_config",
]


class EarlyStopRule(ABC):
    """Base of the early-stop rules: a :class:`budgetmix.policy.EarlyStopPolicy` that composes."""

    __slots__ = ()

    @abstractmethod
    def check(self, view: EpisodeView) -> str | None:
        """The reason to stop the episode now, or ``None`` to go on."""

    @abstractmethod
    def to_config(self) -> dict[str, Any]:
        """The rule as a config mapping; :func:`early_stop_from_config` inverts it."""

    def __or__(self, other: EarlyStopRule) -> StopAny:
        """Stop when either rule does."""
        if not isinstance(other, EarlyStopRule):
            return NotImplemented
        left = self.rules if isinstance(self, StopAny) else (self,)
        right = other.rules if isinstance(other, StopAny) else (other,)
        return StopAny((*left, *right))


def _mistake_kind(path: str, value: Any) -> MistakeKind:
    try:
        return MistakeKind(value)
    except ValueError:
        known = ", ".join(k.value for k in MistakeKind)
        raise ConfigError(f"{path} must be a mistake kind ({known}), got {value!r}") from None


@dataclass(frozen=True, slots=True)
class StopOnRepeatedMistakes(EarlyStopRule):
    """Stop after ``n`` consecutive failed steps with the same mistake kind
    (only of kind ``mistake`` when it is set). A successful step breaks the run.

    Raises:
        ConfigError: ``n`` not an integer >= 1, or an unknown mistake kind.
    """

    n: int = 3
    mistake: MistakeKind | str | None = None

    def __post_init__(self) -> None:
        v.positive_int("StopOnRepeatedMistakes.n", self.n)
        if self.mistake is not None:
            kind = _mistake_kind("StopOnRepeatedMistakes.mistake", self.mistake)
            object.__setattr__(self, "mistake", kind)

    def check(self, view: EpisodeView) -> str | None:
        recent = view.steps[-self.n :]
        if len(recent) < self.n:
            return None
        kinds = {step.mistake for step in recent if not step.ok}
        if len(kinds) != 1 or any(step.ok for step in recent):
            return None
        (kind,) = kinds
        if kind is None or (self.mistake is not None and kind != self.mistake):
            return None
        return f"repeated_mistakes: {self.n} consecutive {kind}"

    def to_config(self) -> dict[str, Any]:
        cfg: dict[str, Any] = {"kind": "repeated_mistakes", "n": self.n}
        if self.mistake is not None:
            cfg["mistake"] = str(self.mistake)
        return cfg


@dataclass(frozen=True, slots=True)
class StopWithoutProgress(EarlyStopRule):
    """Stop once ``turns`` turns have passed since the last step that made progress
    (or since the start). Checked when a step is recorded, so a turn with no
    step at all is noticed at the next step.

    Raises:
        ConfigError: ``turns`` not an integer >= 1.
    """

    turns: int = 5

    def __post_init__(self) -> None:
        v.positive_int("StopWithoutProgress.turns", self.turns)

    def check(self, view: EpisodeView) -> str | None:
        last = max((step.turn for step in view.steps if step.progress), default=0)
        if view.state.turns_used - last >= self.turns:
            return f"no_progress: {self.turns} turns"
        return None

    def to_config(self) -> dict[str, Any]:
        return {"kind": "no_progress", "turns": self.turns}


@dataclass(frozen=True, slots=True)
class StopAny(EarlyStopRule):
    """Stop when any of ``rules`` does, with the first rule's reason.
    Built by ``rule_a | rule_b``.

    Raises:
        ConfigError: no rules, or a rule that is not an :class:`EarlyStopRule`.
    """

    rules: tuple[EarlyStopRule, ...]

    def __post_init__(self) -> None:
        rules = tuple(self.rules)
        if not rules:
            raise ConfigError("StopAny.rules must not be empty")
        for rule in rules:
            if not isinstance(rule, EarlyStopRule):
                raise ConfigError(f"StopAny.rules must be early-stop rules, got {rule!r}")
        object.__setattr__(self, "rules", rules)

    def check(self, view: EpisodeView) -> str | None:
        for rule in self.rules:
            reason = rule.check(view)
            if reason:
                return reason
        return None

    def to_config(self) -> dict[str, Any]:
        return {"kind": "any", "of": [r.to_config() for r in self.rules]}


_KINDS = ("repeated_mistakes", "no_progress", "any")


def early_stop_from_config(
    config: Mapping[str, Any] | str | None, *, path: str = "early_stop"
) -> EarlyStopRule | None:
    """Build an early-stop rule from ``{"kind": ..., ...}`` (or just the kind name).

    Kinds: ``repeated_mistakes`` (``n``, optional ``mistake`` kind), ``no_progress``
    (``turns``), ``any`` (``of``: a list of rule configs). ``None`` or ``"off"``
    means no early stop.

    Raises:
        ConfigError: unknown kind or field, bad value; names the field.
    """
    if config is None or config == "off":
        return None
    cfg: dict[str, Any] = {"kind": config} if isinstance(config, str) else v.mapping(path, config)
    kind = v.kind(path, cfg, _KINDS)
    if kind == "any":
        return StopAny(v.any_of(path, cfg, early_stop_from_config))
    if kind == "no_progress":
        v.only_keys(path, cfg, ("turns",))
        if "turns" in cfg:
            v.positive_int(f"{path}.turns", cfg["turns"])
        return StopWithoutProgress(**cfg)
    v.only_keys(path, cfg, ("n", "mistake"))
    if "n" in cfg:
        v.positive_int(f"{path}.n", cfg["n"])
    mistake = cfg.get("mistake")
    return StopOnRepeatedMistakes(
        n=cfg.get("n", 3),
        mistake=None if mistake is None else _mistake_kind(f"{path}.mistake", mistake),
    )
