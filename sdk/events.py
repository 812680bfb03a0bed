"""Value objects for what happens in an episode: mistakes, recoveries, budget events, results."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from budgetmix._validate import shown
from budgetmix.exceptions import ConfigError

__all__ = [
    "BudgetEvent",
    "EpisodeResult",
    "EpisodeStatus",
    "Mistake",
    "MistakeKind",
    "Recovery",
    "exception_text",
    "mistake_kind",
]


class MistakeKind(StrEnum):
    """The mistake taxonomy."""

    TOOL_ERROR = "tool_error"
    INVALID_TOOL_ARGUMENTS = "invalid_tool_arguments"
    UNKNOWN_TOOL = "unknown_tool"
    ENV_ACTION_FAILED = "env_action_failed"
    MODEL_FORMAT_ERROR = "model_format_error"
    PROVIDER_ERROR = "provider_error"


class EpisodeStatus(StrEnum):
    """Terminal status of an episode; every episode ends with exactly one."""

    SUCCESS = "success"
    FAILED = "failed"
    BUDGET_EXHAUSTED = "budget_exhausted"
    EARLY_STOPPED = "early_stopped"
    ERROR = "error"


def mistake_kind(value: Any, name: str = "kind") -> MistakeKind:
    """``value`` as a :class:`MistakeKind` (the kind itself or its string value).

    Raises:
        ConfigError: not one of the kinds; the message names ``name`` and lists them.
    """
    if isinstance(value, MistakeKind):
        return value
    if isinstance(value, str):
        try:
            return MistakeKind(value)
        except ValueError:
            pass
    known = ", ".join(k.value for k in MistakeKind)
    raise ConfigError(f"{name} must be a MistakeKind ({known}), got {shown(value)}")


def exception_text(exc: BaseException, limit: int = 500) -> str:
    """``"Type: message"`` of an exception, at most ``limit`` characters; never raises:
    an exception whose ``__str__`` fails reads ``"Type: <unprintable Type>"``."""
    name = type(exc).__name__
    try:
        message = str(exc)
    except Exception:
        message = f"<unprintable {name}>"
    return f"{name}: {message}"[:limit]


@dataclass(frozen=True, slots=True, kw_only=True)
class Mistake:
    """One mistake: its id, kind, the turn it happened in, and the tool call if any."""

    id: str
    kind: MistakeKind
    turn: int
    tool: str | None = None
    call_id: str | None = None
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``kind`` as its string)."""
        return {
            "id": self.id,
            "kind": str(self.kind),
            "turn": self.turn,
            "tool": self.tool,
            "call_id": self.call_id,
            "detail": self.detail,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Recovery:
    """The first successful step after one or more mistakes."""

    id: str
    turn: int
    recovered: tuple[str, ...]
    turns_to_recover: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "id": self.id,
            "turn": self.turn,
            "recovered": list(self.recovered),
            "turns_to_recover": self.turns_to_recover,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetEvent:
    """A budget event: ``warning``, ``extended``, ``exhausted``, ``grace_turn``, ``early_stop``."""

    kind: str
    turn: int
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"kind": self.kind, "turn": self.turn, "detail": dict(self.detail)}


@dataclass(frozen=True, slots=True, kw_only=True)
class EpisodeResult:
    """What an episode did. ``stop_reason`` names the limit that stopped it, if any."""

    episode_id: str
    name: str
    status: EpisodeStatus
    stop_reason: str | None
    used: dict[str, float]
    limits: dict[str, float | None]
    mistakes: tuple[Mistake, ...] = ()
    recoveries: tuple[Recovery, ...] = ()
    events: tuple[BudgetEvent, ...] = ()
    trace_id: str | None = None
    grace_turn: bool = False
    final_output: Any = None
    error: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def success(self) -> bool:
        """Whether the episode ended with status ``success``."""
        return self.status is EpisodeStatus.SUCCESS

    @property
    def turns_used(self) -> int:
        """Turns charged, as an int."""
        return int(self.used["turns"])

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (results files, reports)."""
        return {
            "episode_id": self.episode_id,
            "name": self.name,
            "status": str(self.status),
            "stop_reason": self.stop_reason,
            "used": dict(self.used),
            "limits": dict(self.limits),
            "mistakes": [m.to_dict() for m in self.mistakes],
            "recoveries": [r.to_dict() for r in self.recoveries],
            "events": [e.to_dict() for e in self.events],
            "trace_id": self.trace_id,
            "grace_turn": self.grace_turn,
            "error": self.error,
            "metadata": dict(self.metadata),
        }
