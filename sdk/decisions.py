"""An episode's decisions as an I/O-free state machine.

:class:`EpisodeMachine` holds what decides an episode's course (its status, the
dimension that refused, an early stop, whether the grace turn was taken, whether
the warning was given) and answers what to do next, as tenacity's ``iter`` returns
actions: it never charges, traces, calls a hook or a policy.
:class:`~budgetmix.episode.Episode` asks it, then does the I/O (ledger charges,
policies, and the spans, metrics and hooks of :mod:`budgetmix.instrumentation`).
"""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple

from budgetmix.events import EpisodeStatus, exception_text
from budgetmix.exceptions import BudgetExhausted, EarlyStopped
from budgetmix.ledger import LedgerState
from budgetmix.policy import ExhaustionMode

__all__ = ["Closing", "EpisodeMachine", "TurnAction", "budget_stop"]


class TurnAction(Enum):
    """What a request for the next turn leads to."""

    FINISHED = "finished"  # the episode already ended: asking is an error
    CHARGE = "charge"  # charge a turn (extensions asked on a refusal), then open it
    GRACE = "grace"  # open the one tool-less wrap-up turn, charged nowhere
    STOP = "stop"  # refuse: an early stop or a refusing limit ended the loop


# the members as module constants: an Enum attribute lookup costs ~100 ns, every turn
_FINISHED, _CHARGE, _GRACE, _STOP = TurnAction


class Closing(NamedTuple):
    """How an episode ends: its status and stop reason, the error text of an exception,
    and whether ``__exit__`` swallows that exception."""

    status: EpisodeStatus
    stop_reason: str | None = None
    error: str | None = None
    suppress: bool = False


_SUCCESS = Closing(EpisodeStatus.SUCCESS)
_FAILED = Closing(EpisodeStatus.FAILED)
_BUDGET_EXHAUSTED = EpisodeStatus.BUDGET_EXHAUSTED


def budget_stop(
    exc: BaseException, episode_id: str | None
) -> BudgetExhausted | EarlyStopped | None:
    """The budget stop (:class:`BudgetExhausted` or :class:`EarlyStopped`) of episode
    ``episode_id`` behind ``exc``: ``exc`` itself, or one it wraps, as frameworks do
    (smolagents' ``AgentGenerationError``, LiteLLM's ``InternalServerError``): found
    through ``__cause__``, ``__context__`` (even when suppressed by ``from None``) and
    the members of an exception group, nearest first; a cycle is walked once. A stop
    of another episode (a child's) does not count; ``None``: no stop of this one."""
    seen: set[int] = set()
    queue = [exc]
    for found in queue:  # breadth first: the list grows as it is walked
        if id(found) in seen:
            continue
        seen.add(id(found))
        if isinstance(found, (BudgetExhausted, EarlyStopped)) and found.episode_id in (
            episode_id,
            None,
        ):
            return found
        queue.extend(e for e in (found.__cause__, found.__context__) if e is not None)
        if isinstance(found, BaseExceptionGroup):
            queue.extend(found.exceptions)
    return None


class EpisodeMachine:
    """The decisions of one episode; every method is pure bookkeeping.

    Attributes:
        mode: the controller's exhaustion mode (``"end"``, ``"raise"``, ``"grace"``).
        status: the terminal status once decided (``None`` while running).
        exhausted: the first dimension that refused a charge (cleared by a grant that
            unblocks it).
        early_stop: the reason an early-stop policy gave, if any.
        grace_used: whether the grace turn was opened.
        warned: whether the budget warning was given.
    """

    __slots__ = ("early_stop", "exhausted", "grace_used", "mode", "status", "warned")

    def __init__(self, mode: ExhaustionMode) -> None:
        self.mode = mode
        self.status: EpisodeStatus | None = None
        self.exhausted: str | None = None
        self.early_stop: str | None = None
        self.grace_used = False
        self.warned = False

    # -- turns -------------------------------------------------------------------------
    def next_turn(self) -> TurnAction:
        """What asking for a turn does now, before anything is charged."""
        if self.status is not None:
            return _FINISHED
        if self.early_stop is not None:
            return _STOP
        if self.exhausted is not None:
            return self._grace_or_stop()
        return _CHARGE

    def refused(self, dimension: str) -> bool:
        """A limit refused a charge (extensions asked already); ``True`` the first time,
        when the exhaustion is to be reported."""
        if self.exhausted is None:
            self.exhausted = dimension
            return True
        return False

    def after_refusal(self) -> TurnAction:
        """What the refused turn becomes: the grace turn (taken now) or a stop."""
        return self._grace_or_stop()

    def _grace_or_stop(self) -> TurnAction:
        if self.mode == "grace" and not self.grace_used and self.exhausted == "turns":
            self.grace_used = True
            return _GRACE
        return _STOP

    def stopped_by(self) -> tuple[bool, str]:
        """Why the loop stopped: ``(True, reason)`` for an early stop, ``(False,
        dimension)`` for a refusing limit (``"turns"`` when none is recorded)."""
        if self.early_stop is not None:
            return True, self.early_stop
        return False, self.exhausted or "turns"

    def should_warn(self, state: LedgerState, fraction: float) -> bool:
        """Whether the budget warning is due now (given once)."""
        if self.warned or fraction <= 0 or not state.in_last_share(fraction):
            return False
        self.warned = True
        return True

    # -- policies and grants -----------------------------------------------------------
    def stopped_early(self, reason: str | None) -> bool:
        """An early-stop policy answered ``reason``; ``True`` when it ends the episode now
        (the first reason is kept)."""
        if self.early_stop is not None or not reason:
            return False
        self.early_stop = reason
        return True

    def unblocked(self) -> None:
        """A grant left no limit refusing: the episode may charge turns again."""
        self.exhausted = None

    # -- ending ------------------------------------------------------------------------
    def finishing(self, success: bool) -> Closing:
        """How :meth:`~budgetmix.episode.Episode.finish` ends the episode: a failure after
        a refusal (or an early stop) keeps that cause."""
        if success:
            return _SUCCESS
        if self.exhausted is not None:
            return Closing(EpisodeStatus.BUDGET_EXHAUSTED, self.exhausted)
        if self.early_stop is not None:
            return Closing(EpisodeStatus.EARLY_STOPPED, self.early_stop)
        return _FAILED

    def exiting(self, exc: BaseException | None, episode_id: str) -> Closing | None:
        """How leaving the ``with`` block ends the episode (``None``: it ended before and
        a clean exit changes nothing). A budget stop of this episode is an outcome,
        swallowed unless the mode is ``"raise"``. A framework's exception wrapping one
        (found by :func:`budget_stop`) ends the episode the same way, with the
        framework's exception as its error text, and propagates: it is not budgetmix's
        to swallow. So does any exception after this episode's ledger refused a charge
        (:meth:`_ledger_stop`). Any other exception is an error."""
        if exc is None:
            return self.finishing(False) if self.status is None else None
        stop = budget_stop(exc, episode_id)
        if stop is None:
            return self._ledger_stop(exc)
        direct = stop is exc
        swallow = direct and self.mode != "raise"
        error = None if direct else exception_text(exc)
        if isinstance(stop, BudgetExhausted):
            return Closing(EpisodeStatus.BUDGET_EXHAUSTED, stop.dimension, error, swallow)
        return Closing(EpisodeStatus.EARLY_STOPPED, stop.reason, error, swallow)

    def _ledger_stop(self, exc: BaseException) -> Closing:
        """An exception that carries no budget stop of this episode: still a budget stop
        when this episode's ledger refused a charge (or a policy stopped it early), as a
        framework that re-raises inside another ``except`` drops the stop from the chain
        (Google ADK): the outcome is the ledger's, the framework's exception its error
        text (and it propagates). Otherwise an error."""
        error = exception_text(exc)
        if self.exhausted is not None:
            return Closing(EpisodeStatus.BUDGET_EXHAUSTED, self.exhausted, error)
        if self.early_stop is not None:
            return Closing(EpisodeStatus.EARLY_STOPPED, self.early_stop, error)
        return Closing(EpisodeStatus.ERROR, error=error)

    def close(self, closing: Closing) -> bool:
        """Take ``closing``'s status; ``False`` when the episode had ended already."""
        if self.status is not None:
            return False
        self.status = closing.status
        return True

    def raises_after_exit(self) -> bool:
        """Whether a clean exit raises :class:`BudgetExhausted` (``exhaustion="raise"``)."""
        return self.mode == "raise" and self.status is _BUDGET_EXHAUSTED
