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

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from budgetmix._validate import check_int
from budgetmix.events import MistakeKind, mistake_kind
from budgetmix.policies._from_config import rule_from_config
from budgetmix.policy import EarlyStopRule, EpisodeView, Rule

__all__ = ["StopOnRepeatedMistakes", "StopWithoutProgress", "early_stop_from_config"]


@dataclass(frozen=True, slots=True)
class StopOnRepeatedMistakes(EarlyStopRule):
    """Stop after ``n`` consecutive failed steps with the same mistake kind
    (only of kind ``mistake`` when it is set). A successful step breaks the run.

    Raises:
        ConfigError: ``n`` not an integer >= 1, or an unknown mistake kind.
    """

    n: int = 3
    mistake: MistakeKind | str | None = None
    config_kind: ClassVar[str] = "repeated_mistakes"

    def __post_init__(self) -> None:
        check_int("StopOnRepeatedMistakes.n", self.n, minimum=1)
        if self.mistake is not None:
            kind = mistake_kind(self.mistake, "StopOnRepeatedMistakes.mistake")
            object.__setattr__(self, "mistake", kind)

    def check(self, view: EpisodeView) -> str | None:
        """``"repeated_mistakes: <n> consecutive <kind>"`` once the last ``n`` steps
        failed with one (matching) mistake kind."""
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


@dataclass(frozen=True, slots=True)
class StopWithoutProgress(EarlyStopRule):
    """Stop once ``turns`` turns have passed since the last step that made progress
    (or since the start). Checked when a step is recorded, so a turn with no
    step at all is noticed at the next step.

    Raises:
        ConfigError: ``turns`` not an integer >= 1.
    """

    turns: int = 5
    config_kind: ClassVar[str] = "no_progress"

    def __post_init__(self) -> None:
        check_int("StopWithoutProgress.turns", self.turns, minimum=1)

    def check(self, view: EpisodeView) -> str | None:
        """``"no_progress: <turns> turns"`` once that many turns passed without progress."""
        last = max((step.turn for step in view.steps if step.progress), default=0)
        if view.state.turns_used - last >= self.turns:
            return f"no_progress: {self.turns} turns"
        return None


_KINDS = (StopOnRepeatedMistakes, StopWithoutProgress)


def early_stop_from_config(
    config: Mapping[str, Any] | str | None, *, path: str = "early_stop"
) -> Rule[EarlyStopRule] | None:
    """Build an early-stop rule from ``{"kind": ..., ...}`` (or just the kind name).

    Kinds: ``repeated_mistakes`` (``n``, optional ``mistake`` kind), ``no_progress``
    (``turns``), ``any`` (``of``: a list of rule configs). ``None`` or ``"off"``
    means no early stop.

    Raises:
        ConfigError: unknown kind or field, bad value; names the field.
    """
    if config is None or config == "off":
        return None
    return rule_from_config(config, path=path, kinds=_KINDS, member=early_stop_from_config)
