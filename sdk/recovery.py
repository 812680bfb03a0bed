"""Mistake and recovery bookkeeping: I/O-free, one object per episode.

A recovery is the first successful step after one or more mistakes; it
records which mistakes it recovers from and how many turns that took.
"""

from __future__ import annotations

import threading

from budgetmix.events import Mistake, MistakeKind, Recovery, mistake_kind
from budgetmix.exceptions import ConfigError

__all__ = ["RecoveryTracker"]


class RecoveryTracker:
    """Collects mistakes and turns successes after them into recoveries."""

    __slots__ = ("_lock", "_pending", "mistakes", "recoveries")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[Mistake] = []
        self.mistakes: list[Mistake] = []
        self.recoveries: list[Recovery] = []

    def mistake(
        self,
        kind: MistakeKind | str,
        turn: int,
        *,
        tool: str | None = None,
        call_id: str | None = None,
        detail: str = "",
    ) -> Mistake:
        """Record a mistake in ``turn``; ``detail`` is kept with credentials masked
        (:func:`~budgetmix.telemetry.redact_text`).

        Raises:
            ConfigError: ``kind`` is not a mistake kind, ``detail`` not a str, or
                ``tool`` / ``call_id`` neither a str nor ``None``.
        """
        kind = mistake_kind(kind)
        if not isinstance(detail, str):
            raise ConfigError(f"detail must be a str, got {type(detail).__name__}")
        if detail:
            # a tool's error text may quote a credential; the detail reaches the result,
            # its JSON form and every log of it, so it is masked once, here
            from budgetmix.telemetry.redaction import redact_text

            detail = redact_text(detail)
        for field, value in (("tool", tool), ("call_id", call_id)):
            if value is not None and not isinstance(value, str):
                raise ConfigError(f"{field} must be a str or None, got {type(value).__name__}")
        with self._lock:
            m = Mistake(
                id=f"m{len(self.mistakes) + 1}",
                kind=kind,
                turn=turn,
                tool=tool,
                call_id=call_id,
                detail=detail,
            )
            self.mistakes.append(m)
            self._pending.append(m)
            return m

    def success(self, turn: int) -> Recovery | None:
        """Record a successful step; returns the recovery it completes, if any."""
        with self._lock:
            if not self._pending:
                return None
            r = Recovery(
                id=f"r{len(self.recoveries) + 1}",
                turn=turn,
                recovered=tuple(m.id for m in self._pending),
                turns_to_recover=turn - self._pending[0].turn,
            )
            self._pending.clear()
            self.recoveries.append(r)
            return r

    @property
    def unrecovered(self) -> int:
        """Mistakes since the last successful step, not yet recovered from."""
        return len(self._pending)
