"""Extension policies: granting more turns than the episode started with.

Two styles, composable with ``|`` (the first rule that grants wins):

- :class:`ExtendOnDemand` ("dynamic turns"): a fixed limit plus grants the
  agent asks for through the ``request_more_turns`` tool, ``step`` turns at most
  per grant and ``max_grants`` grants at most per episode. The adapters' loop
  exposes the tool when the controller's extension contains one
  (:func:`find_on_demand`) and answers it with :meth:`ExtendOnDemand.run_tool`.
- :class:`ExtendOnProgress` (rule-based): when the turn limit refuses a turn,
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
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from budgetmix._validate import check_bool, check_int
from budgetmix.accounting import DEFAULT_ACCOUNTING, AccountingPolicy
from budgetmix.exceptions import ConfigError
from budgetmix.policies._from_config import rule_from_config
from budgetmix.policies.accounting import refund_tools
from budgetmix.policy import AnyOf, EpisodeView, ExtensionRule, Rule

if TYPE_CHECKING:
    from budgetmix.episode import Episode

__all__ = [
    "ON_DEMAND_GRANTS_KEY",
    "REQUEST_MORE_TURNS",
    "ExtendOnDemand",
    "ExtendOnProgress",
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


@dataclass(frozen=True, slots=True)
class ExtendOnDemand(ExtensionRule):
    """Grants the agent asks for with ``request_more_turns``: ``min(requested, step)``
    turns per request, at most ``max_grants`` grants per episode.

    Raises:
        ConfigError: ``step`` or ``max_grants`` not an integer >= 1.
    """

    step: int = 5
    max_grants: int = 2
    config_kind: ClassVar[str] = "on_demand"

    def __post_init__(self) -> None:
        check_int("ExtendOnDemand.step", self.step, minimum=1)
        check_int("ExtendOnDemand.max_grants", self.max_grants, minimum=1)

    def on_limit(self, view: EpisodeView, dimension: str) -> dict[str, float] | None:
        """Nothing at the limit: this policy grants only when the agent asks."""
        return None

    def request(self, episode: Episode, n_requested: int) -> int:
        """Answer a request for ``n_requested`` more turns; returns the turns granted.

        Grants through ``episode.grant(turns=...)`` and appends
        ``{"turn", "requested", "granted"}`` to the episode's
        ``metadata["budgetmix.on_demand_grants"]`` (refusals too, with ``granted`` 0).

        Raises:
            ConfigError: ``n_requested`` is not an integer >= 1 (a bad tool argument;
                a ``ValueError``).
        """
        check_int("turns", n_requested, minimum=1)
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
            ConfigError: the arguments do not match :func:`request_more_turns_tool`.
        """
        unknown = sorted(set(arguments) - {"turns"})
        if unknown or "turns" not in arguments:
            raise ConfigError(
                f"{REQUEST_MORE_TURNS} takes exactly one argument 'turns', got {sorted(arguments)}"
            )
        return request_more_turns_result(self.request(episode, arguments["turns"]))


@dataclass(frozen=True, slots=True)
class ExtendOnProgress(ExtensionRule):
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
    config_kind: ClassVar[str] = "progress"

    def __post_init__(self) -> None:
        check_int("ExtendOnProgress.turns", self.turns, minimum=1)
        check_bool("ExtendOnProgress.once", self.once)
        check_int("ExtendOnProgress.lookback", self.lookback, minimum=1)

    def on_limit(self, view: EpisodeView, dimension: str) -> dict[str, float] | None:
        """``{"turns": turns}`` when the turn limit refused and recent steps made progress."""
        if dimension != "turns" or (self.once and view.grants > 0):
            return None
        remaining = view.state.remaining("turns")
        if remaining is None or remaining > 0:
            return None
        recent = view.steps[-self.lookback :]
        if not any(step.progress for step in recent):
            return None
        return {"turns": self.turns}


def find_on_demand(policy: object) -> ExtendOnDemand | None:
    """The :class:`ExtendOnDemand` in ``policy`` (itself or inside an :class:`AnyOf`).

    Adapters call this on ``controller.extension`` to decide whether to offer
    the ``request_more_turns`` tool.
    """
    if isinstance(policy, ExtendOnDemand):
        return policy
    if isinstance(policy, AnyOf):
        # members are never AnyOf themselves: AnyOf flattens them
        return next((r for r in policy.rules if isinstance(r, ExtendOnDemand)), None)
    return None


_KINDS = (ExtendOnDemand, ExtendOnProgress)


def extension_from_config(
    config: Mapping[str, Any] | str | None, *, path: str = "extension"
) -> Rule[ExtensionRule] | None:
    """Build an extension rule from ``{"kind": ..., ...}`` (or just the kind name).

    Kinds: ``on_demand`` (``step``, ``max_grants``), ``progress`` (``turns``,
    ``once``, ``lookback``), ``any`` (``of``: a list of rule configs).
    ``None`` or ``"off"`` means no extension.

    Raises:
        ConfigError: unknown kind or field, bad value; names the field.
    """
    if config is None or config == "off":
        return None
    return rule_from_config(config, path=path, kinds=_KINDS, member=extension_from_config)
