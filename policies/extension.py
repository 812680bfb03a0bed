"""Extension policies: granting more turns than the episode started with.

Two styles, composable with ``|`` (the first rule that grants wins):

- :class:`OnDemandExtension` ("dynamic turns"): a fixed limit plus grants the
  agent asks for through the ``request_more_turns`` tool, ``step`` turns at most
  per grant and ``max_grants`` grants at most per episode. The adapters' loop
  exposes the tool when the controller's extension contains one
  (:func:`find_on_demand`) and answers it with :meth:`OnDemandExtension.run_tool`.
- :class:`ProgressExtension` (rule-based): when the turn limit refuses a turn,
  grant ``turns`` more if one of the last ``lookback`` steps made progress.

Every grant goes through :meth:`budgetmix.Episode.grant`, so it is recorded as an
``extended`` event and raises the limit the notice shows. On-demand requests are
also logged, granted or not, under ``metadata["budgetmix.on_demand_grants"]`` of the
episode (and so of its result).

Calls of ``request_more_turns`` should not cost a tool call: build the
controller's accounting with :func:`with_free_request_tool` (the config bundle
does this for you).
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from budgetmix.accounting import DEFAULT_ACCOUNTING, AccountingPolicy
from budgetmix.exceptions import ConfigError
from budgetmix.policies import _validate as v
from budgetmix.policies.accounting import refund_tools
from budgetmix.policy import EpisodeView, ExtensionPolicy

if TYPE_CHECKING:
    from budgetmix.episode import Episode

__all__ = [
    "ON_DEMAND_GRANTS_KEY",
    "REQUEST_MORE_TURNS",
    "ExtendAny",
    "ExtensionRule",
    "OnDemandExtension",
    "ProgressExtension",
    "extension_from_config",
    "find_on_demand",
    "request_more_turns_result",
    "request_more_turns_tool",
    "with_free_request_tool",
]

#: Name of the tool through which the agent asks for more turns.
REQUEST_MORE_TURNS = "request_more_turns"

#: Episode metadata key holding the log of on-demand requests.
ON_DEMAND_GRANTS_KEY = "budgetmix.on_demand_grants"

# requests may arrive from parallel tool calls; the count-then-grant must be atomic
_REQUEST_LOCK = threading.Lock()


def request_more_turns_tool() -> dict[str, Any]:
    """The ``request_more_turns`` tool as ``{"name", "description", "parameters"}``.

    The mapping fits :class:`budgetmix.adapters.base.ToolSpec` (``ToolSpec(**spec)``)
    and the function-tool shapes of the provider APIs. The description is neutral:
    it states what the tool does, not when the agent ought to use it.
    """
    return {
        "name": REQUEST_MORE_TURNS,
        "description": (
            "Request more turns than the current turn limit. Grants are limited in "
            "size and number; the result states how many turns were granted."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "turns": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "Number of additional turns requested.",
                }
            },
            "required": ["turns"],
            "additionalProperties": False,
        },
    }


def request_more_turns_result(granted: int) -> str:
    """The tool result text for a request that granted ``granted`` turns."""
    if granted <= 0:
        return "No turns granted."
    return f"Granted {granted} more turn{'s' if granted != 1 else ''}."


def with_free_request_tool(accounting: AccountingPolicy = DEFAULT_ACCOUNTING) -> AccountingPolicy:
    """``accounting`` with ``request_more_turns`` calls free of tool-call charges."""
    return refund_tools(REQUEST_MORE_TURNS, base=accounting)


class ExtensionRule(ABC):
    """Base of the extension rules: a :class:`budgetmix.policy.ExtensionPolicy` that composes."""

    __slots__ = ()

    @abstractmethod
    def on_limit(self, view: EpisodeView, dimension: str) -> dict[str, float] | None:
        """Amounts to grant now that ``dimension`` refused a turn, or ``None``."""

    @abstractmethod
    def to_config(self) -> dict[str, Any]:
        """The rule as a config mapping; :func:`extension_from_config` inverts it."""

    def __or__(self, other: ExtensionRule) -> ExtendAny:
        """Ask this rule first, then ``other``."""
        if not isinstance(other, ExtensionRule):
            return NotImplemented
        left = self.rules if isinstance(self, ExtendAny) else (self,)
        right = other.rules if isinstance(other, ExtendAny) else (other,)
        return ExtendAny((*left, *right))


@dataclass(frozen=True, slots=True)
class OnDemandExtension(ExtensionRule):
    """Grants the agent asks for with ``request_more_turns``: ``min(requested, step)``
    turns per request, at most ``max_grants`` grants per episode.

    Raises:
        ConfigError: ``step`` or ``max_grants`` not an integer >= 1.
    """

    step: int = 5
    max_grants: int = 2

    def __post_init__(self) -> None:
        v.positive_int("OnDemandExtension.step", self.step)
        v.positive_int("OnDemandExtension.max_grants", self.max_grants)

    def on_limit(self, view: EpisodeView, dimension: str) -> dict[str, float] | None:
        """Nothing at the limit: this policy grants only when the agent asks."""
        return None

    def request(self, episode: Episode, n_requested: int) -> int:
        """Answer a request for ``n_requested`` more turns; returns the turns granted.

        Grants through ``episode.grant(turns=...)`` and appends
        ``{"turn", "requested", "granted"}`` to the episode's
        ``metadata["budgetmix.on_demand_grants"]`` (refusals too, with ``granted`` 0).

        Raises:
            ValueError: ``n_requested`` is not an integer >= 1 (a bad tool argument).
        """
        if isinstance(n_requested, bool) or not isinstance(n_requested, int) or n_requested < 1:
            raise ValueError(f"turns must be an integer >= 1, got {n_requested!r}")
        with _REQUEST_LOCK:
            log: list[dict[str, int]] = episode.metadata.setdefault(ON_DEMAND_GRANTS_KEY, [])
            done = sum(1 for entry in log if entry["granted"] > 0)
            granted = 0 if done >= self.max_grants else min(n_requested, self.step)
            if granted:
                episode.grant(turns=granted)
            log.append(
                {
                    "turn": episode.state.turn_number,
                    "requested": n_requested,
                    "granted": granted,
                }
            )
        return granted

    def run_tool(self, episode: Episode, arguments: Mapping[str, Any]) -> str:
        """Run the ``request_more_turns`` tool on its parsed arguments; returns its result text.

        Raises:
            ValueError: the arguments do not match :func:`request_more_turns_tool`.
        """
        unknown = sorted(set(arguments) - {"turns"})
        if unknown or "turns" not in arguments:
            raise ValueError(
                f"{REQUEST_MORE_TURNS} takes exactly one argument 'turns', got {sorted(arguments)}"
            )
        return request_more_turns_result(self.request(episode, arguments["turns"]))

    def to_config(self) -> dict[str, Any]:
        return {"kind": "on_demand", "step": self.step, "max_grants": self.max_grants}


@dataclass(frozen=True, slots=True)
class ProgressExtension(ExtensionRule):
    """When the turn limit refuses a turn, grant ``turns`` more if one of the last
    ``lookback`` steps made progress (``StepRecord.progress``).

    With ``once`` (default) it grants only while the episode has had no grant at
    all, from any policy. It never grants when the refusal comes from a parent
    episode's limit, since raising this episode's limit could not help.

    Raises:
        ConfigError: ``turns`` or ``lookback`` not an integer >= 1, ``once`` not a bool.
    """

    turns: int = 2
    once: bool = True
    lookback: int = 3

    def __post_init__(self) -> None:
        v.positive_int("ProgressExtension.turns", self.turns)
        v.boolean("ProgressExtension.once", self.once)
        v.positive_int("ProgressExtension.lookback", self.lookback)

    def on_limit(self, view: EpisodeView, dimension: str) -> dict[str, float] | None:
        if dimension != "turns" or (self.once and view.grants > 0):
            return None
        remaining = view.state.remaining("turns")
        if remaining is None or remaining > 0:
            return None
        recent = view.steps[-self.lookback :]
        if not any(step.progress for step in recent):
            return None
        return {"turns": self.turns}

    def to_config(self) -> dict[str, Any]:
        return {
            "kind": "progress",
            "turns": self.turns,
            "once": self.once,
            "lookback": self.lookback,
        }


@dataclass(frozen=True, slots=True)
class ExtendAny(ExtensionRule):
    """Asks ``rules`` in order; the first grant wins. Built by ``rule_a | rule_b``.

    Raises:
        ConfigError: no rules, or a rule that is not an :class:`ExtensionRule`.
    """

    rules: tuple[ExtensionRule, ...]

    def __post_init__(self) -> None:
        rules = tuple(self.rules)
        if not rules:
            raise ConfigError("ExtendAny.rules must not be empty")
        for rule in rules:
            if not isinstance(rule, ExtensionRule):
                raise ConfigError(f"ExtendAny.rules must be extension rules, got {rule!r}")
        object.__setattr__(self, "rules", rules)

    def on_limit(self, view: EpisodeView, dimension: str) -> dict[str, float] | None:
        for rule in self.rules:
            grant = rule.on_limit(view, dimension)
            if grant:
                return grant
        return None

    def to_config(self) -> dict[str, Any]:
        return {"kind": "any", "of": [r.to_config() for r in self.rules]}


def find_on_demand(policy: ExtensionPolicy | None) -> OnDemandExtension | None:
    """The :class:`OnDemandExtension` in ``policy`` (itself or inside an :class:`ExtendAny`).

    Adapters call this on ``controller.extension`` to decide whether to offer
    the ``request_more_turns`` tool.
    """
    if isinstance(policy, OnDemandExtension):
        return policy
    if isinstance(policy, ExtendAny):
        for rule in policy.rules:
            found = find_on_demand(rule)
            if found is not None:
                return found
    return None


_KINDS = ("on_demand", "progress", "any")
_FIELDS: dict[str, tuple[str, ...]] = {
    "on_demand": ("step", "max_grants"),
    "progress": ("turns", "once", "lookback"),
}


def extension_from_config(
    config: Mapping[str, Any] | str | None, *, path: str = "extension"
) -> ExtensionRule | None:
    """Build an extension rule from ``{"kind": ..., ...}`` (or just the kind name).

    Kinds: ``on_demand`` (``step``, ``max_grants``), ``progress`` (``turns``,
    ``once``, ``lookback``), ``any`` (``of``: a list of rule configs).
    ``None`` or ``"off"`` means no extension.

    Raises:
        ConfigError: unknown kind or field, bad value; names the field.
    """
    if config is None or config == "off":
        return None
    cfg: dict[str, Any] = {"kind": config} if isinstance(config, str) else v.mapping(path, config)
    kind = v.kind(path, cfg, _KINDS)
    if kind == "any":
        return ExtendAny(v.any_of(path, cfg, extension_from_config))
    v.only_keys(path, cfg, _FIELDS[kind])
    for key in ("step", "max_grants", "turns", "lookback"):
        if key in cfg:
            v.positive_int(f"{path}.{key}", cfg[key])
    if "once" in cfg:
        v.boolean(f"{path}.once", cfg["once"])
    if kind == "on_demand":
        return OnDemandExtension(**cfg)
    return ProgressExtension(**cfg)
