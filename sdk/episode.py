"""An episode: one budgeted run of an agent loop, with its ledger, events and spans.

Its ledger counts, its :class:`~budgetmix.decisions.EpisodeMachine` decides, the
controller's policies are asked here, and its
:class:`~budgetmix.instrumentation.EpisodeTelemetry` writes every span, metric and hook
call. Turns and tool calls reach it through :mod:`budgetmix.steps`' owner protocols.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from budgetmix import semconv as sc
from budgetmix._validate import check_call_ids, check_tool_names
from budgetmix.budget import Budget
from budgetmix.call_claims import claimed_ids
from budgetmix.decisions import Closing, EpisodeMachine, TurnAction
from budgetmix.events import BudgetEvent, EpisodeResult, Mistake, MistakeKind, Recovery
from budgetmix.exceptions import BudgetExhausted, BudgetmixError, EarlyStopped
from budgetmix.instrumentation import EpisodeTelemetry
from budgetmix.ledger import Ledger, LedgerState
from budgetmix.notice import render_notice
from budgetmix.policy import StepRecord
from budgetmix.recovery import RecoveryTracker
from budgetmix.steps import ToolCall, Turn
from budgetmix.stores import LedgerStore, new_ledger
from opentelemetry.trace import Span

if TYPE_CHECKING:
    from budgetmix.controller import BudgetController

__all__ = ["Episode", "current_episode"]

_FINISHED, _CHARGE, _GRACE, _STOP = TurnAction  # an Enum attribute lookup costs ~100 ns

_CURRENT: contextvars.ContextVar[Episode | None] = contextvars.ContextVar(
    "budgetmix_episode", default=None
)


def current_episode() -> Episode | None:
    """The innermost episode entered in this thread or task, if any."""
    return _CURRENT.get()


class Episode:
    """One budgeted run. Create with :meth:`BudgetController.episode`; use as a
    (sync or async) context manager. After exit, :attr:`result` holds the outcome."""

    def __init__(
        self,
        controller: BudgetController,
        *,
        name: str,
        budget: Budget,
        episode_id: str,
        metadata: dict[str, Any],
        parent: Episode | None,
        conversation_id: str | None = None,
        store: LedgerStore | None = None,
    ) -> None:
        self.controller = controller
        self.name = name
        self.id = episode_id
        self.metadata = metadata
        self.conversation_id = conversation_id
        self.parent = parent
        self.ledger: Ledger = new_ledger(  # a store: its numbers there, under the id
            budget,
            store=store,
            key=episode_id,
            parent=parent.ledger if parent is not None else None,
            accounting=controller.accounting,
            clock=controller.clock,
        )
        self.transcript: list[Any] = []
        self.result: EpisodeResult | None = None
        self._machine = EpisodeMachine(controller.exhaustion)
        self._tracker = RecoveryTracker()
        self._steps: list[StepRecord] = []
        self._outcomes: set[str] = set()  # tool call ids whose outcome is recorded
        self._events: list[BudgetEvent] = []
        self._hook_errors: list[str] = []
        self._trace = EpisodeTelemetry(controller.instrumentation, self, self._hook_errors)
        self._turn: Turn | None = None
        self._turn_span: Span | None = None  # the span of the turn in progress
        self._grants = 0
        self._output: Any = None
        self._ctx_token: contextvars.Token[Episode | None] | None = None

    # -- EpisodeView (what policies read) ----------------------------------------------
    @property
    def state(self) -> LedgerState:
        """A snapshot of the ledger (the turn in progress counted in ``turn_number``)."""
        return self.ledger.state(in_turn=self._turn is not None)

    @property
    def mistakes(self) -> Sequence[Mistake]:
        """The mistakes recorded so far."""
        return self._tracker.mistakes

    @property
    def recoveries(self) -> Sequence[Recovery]:
        """The recoveries recorded so far."""
        return self._tracker.recoveries

    @property
    def steps(self) -> Sequence[StepRecord]:
        """Every step (tool call or environment action) recorded so far."""
        return self._steps

    @property
    def grants(self) -> int:
        """How many times limits were extended."""
        return self._grants

    @property
    def turn_number(self) -> int:
        """Turns charged so far."""
        return int(self.ledger.used("turns"))

    @property
    def finished(self) -> bool:
        """Whether the episode has ended."""
        return self._machine.status is not None

    # -- context management ------------------------------------------------------------
    def __enter__(self) -> Episode:
        self._trace.start(self.parent._trace if self.parent is not None else None)
        self._ctx_token = _CURRENT.set(self)
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        closing = self._machine.exiting(exc, self.id)
        if closing is not None:
            self._close(closing)
        self._trace.leave()  # its span is current no more
        if self._ctx_token is not None:
            try:
                _CURRENT.reset(self._ctx_token)
            except ValueError:  # exited in another context (a task): nothing to restore
                _CURRENT.set(None)
            self._ctx_token = None
        if exc is None and self._machine.raises_after_exit():
            assert self.result is not None
            raise self._exhausted_error(self.result.stop_reason or "turns")
        return closing is not None and closing.suppress

    async def __aenter__(self) -> Episode:
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        return self.__exit__(exc_type, exc, tb)

    # -- turns -------------------------------------------------------------------------
    def begin_turn(self, *, model: str | None = None) -> Turn:
        """Charge one turn and return it; the request may now be sent.

        Raises:
            BudgetExhausted: a limit refuses the turn (nothing should be sent).
            EarlyStopped: an early-stop policy ended the episode.
            BudgetmixError: the episode already finished.
        """
        turn = self.try_begin_turn(model=model)
        if turn is None:
            early, why = self._machine.stopped_by()
            if early:
                raise EarlyStopped(why, self.id)
            raise self._exhausted_error(why)
        return turn

    def try_begin_turn(self, *, model: str | None = None) -> Turn | None:
        """Like :meth:`begin_turn`, but returns ``None`` where it would raise a budget stop."""
        action = self._machine.next_turn()
        if action is _FINISHED:
            raise BudgetmixError(f"episode {self.id} already finished ({self._machine.status})")
        self._end_turn()
        if action is _CHARGE:
            blocked = self.ledger.try_charge_turn()
            if blocked is None or self._extend(blocked, self.ledger.try_charge_turn) is None:
                return self._open_turn(model, grace=False)
            action = self._machine.after_refusal()
        if action is _GRACE:
            self._event(sc.BM_EVENT_GRACE, "grace_turn", {})
            return self._open_turn(model, grace=True)
        return None

    def turns(self, *, model: str | None = None) -> Iterator[Turn]:
        """Yield charged turns until the budget (or an early stop) ends the loop."""
        while True:
            turn = self.try_begin_turn(model=model)
            if turn is None:
                return
            with turn:
                yield turn
            if self._machine.status is not None:
                return

    @property
    def notice(self) -> str | None:
        """The notice of the turn in progress (``None`` if none or the policy is silent)."""
        return self._turn.notice if self._turn is not None else None

    def render_notice(self) -> str:
        """The notice for the current state, regardless of the notice policy."""
        return render_notice(self.state, self.controller.notice.format)

    def _open_turn(self, model: str | None, *, grace: bool) -> Turn:
        c = self.controller
        # a charged turn is told what its charge left (no second read of a store)
        state = (self.ledger.state if grace else self.ledger.charged_state)(in_turn=True)
        notice: str | None = None
        if grace or c.notice.should_notify(state):
            notice = render_notice(state, c.notice.format)
        number = state.turn_number + (1 if grace else 0)
        remaining = state.turns_remaining - 1
        span = self._trace.turn_span(number, model, grace, remaining)
        turn = Turn(self, number, model, notice, span, grace=grace)
        self._turn, self._turn_span = turn, span
        if not grace:
            if self._machine.should_warn(state, c.warn_fraction):
                left = {"turns_remaining": state.turns_remaining}
                self._event(sc.BM_EVENT_WARNING, "warning", left)
                self._trace.warning(state)
            self._trace.turn_opened(number)
        return turn

    def _end_turn(self) -> None:
        if self._turn is not None:
            self._turn.end()
            self._turn = self._turn_span = None

    # -- charging ----------------------------------------------------------------------
    def _extend(self, blocked: str, charge: Callable[[], str | None]) -> str | None:
        """``charge`` was refused on ``blocked``: ask the extension policy once per
        refusing dimension, charging again after each grant (one that does not unblock,
        e.g. a parent's limit, must not loop forever); what still refuses is returned."""
        ext = self.controller.extension
        asked: set[str] = set()
        current: str | None = blocked
        while ext is not None and current is not None and current not in asked:
            asked.add(current)
            grant = ext.on_limit(self, current)
            if not grant:
                break
            self.grant(**grant)
            current = charge()
        if current is not None:
            self._refused(current)
        return current

    def _refused(self, dimension: str) -> None:  # the first refusal is reported
        if self._machine.refused(dimension):
            self._event(sc.BM_EVENT_EXHAUSTED, "exhausted", {"dimension": dimension})
            self._trace.exhausted(dimension)

    def _exhausted_error(self, dim: str, refused: Sequence[str | None] = ()) -> BudgetExhausted:
        # a refused call's outcome is the stop: the error a framework sends back is no mistake
        self._outcomes.update(cid for cid in refused if cid)
        counts, limits = self.ledger.counts(), self.ledger.limits()
        return BudgetExhausted(dim, counts, limits, transcript=self.transcript, episode_id=self.id)

    # -- tools -------------------------------------------------------------------------
    def tool_batch(
        self, names: Sequence[str], call_ids: Sequence[str | None] | None = None
    ) -> list[ToolCall]:
        """Pre-check and charge a (parallel) batch of tool calls as a whole.

        Raises:
            BudgetExhausted: the batch does not fit, or this is the (tool-less) grace
                turn; no call of it was charged.
            ConfigError: ``names`` is not a list of strings (a bare string is not), or
                ``call_ids`` not one str or ``None`` per name; nothing was charged.
        """
        check_tool_names("names", names)
        ids = claimed_ids(self, names, check_call_ids(names, call_ids))  # the wire's ids
        if names and self._turn is not None and self._turn.grace:
            # the grace turn is a tool-less wrap-up: its tool calls would need another turn
            raise self._exhausted_error(self._machine.exhausted or "turns", refused=ids)
        blocked = self.ledger.try_charge_tool_batch(names)
        if blocked is not None:
            blocked = self._extend(blocked, lambda: self.ledger.try_charge_tool_batch(names))
            if blocked is not None:
                raise self._exhausted_error(blocked, refused=ids)
        turn = self.turn_number
        spans = self._trace.tool_spans(self._turn_span, names, ids)
        return [
            ToolCall(self, name, cid, turn, span)
            for name, cid, span in zip(names, ids, spans, strict=True)
        ]

    def tool_call(self, name: str, call_id: str | None = None) -> ToolCall:
        """A batch of one."""
        return self.tool_batch([name], [call_id])[0]

    def record_tool_result(
        self, call_id: str, *, ok: bool, tool: str | None = None, detail: str = ""
    ) -> bool:
        """Record the outcome of a tool call not run through :meth:`tool_call` (the
        adapters read them from a request's tool results): a success is a step, a failure
        a ``tool_error`` mistake. Once per call id: ``False`` when it is known already."""
        if call_id in self._outcomes:
            return False
        if ok:
            self._outcomes.add(call_id)
            self.record_step(ok=True, progress=True)
        else:
            self.record_mistake(MistakeKind.TOOL_ERROR, tool=tool, call_id=call_id, detail=detail)
        return True

    # -- mistakes, steps, recoveries ---------------------------------------------------
    def record_mistake(
        self,
        kind: MistakeKind | str,
        *,
        tool: str | None = None,
        call_id: str | None = None,
        detail: str = "",
    ) -> Mistake:
        """Record a mistake (also a failed step) and emit ``budgetmix.mistake``.

        ``detail`` is kept with credentials masked (it often quotes a tool's error).

        Raises:
            ConfigError: ``kind`` is not a :class:`MistakeKind` (or its value), or
                ``detail``, ``tool``, ``call_id`` of the wrong type; nothing is recorded.
        """
        turn = self.turn_number
        m = self._tracker.mistake(kind, turn, tool=tool, call_id=call_id, detail=detail)
        if call_id:
            self._outcomes.add(call_id)
        self._steps.append(StepRecord(turn, ok=False, mistake=str(m.kind)))
        self._trace.mistake(self._turn_span, m)
        self._check_early_stop()
        return m

    def record_step(
        self,
        *,
        ok: bool,
        progress: bool = False,
        mistake: MistakeKind | str | None = None,
        detail: str = "",
    ) -> None:
        """Record an environment step; a failed one records a mistake of ``mistake`` kind
        (default ``env_action_failed``), a successful one may complete a recovery."""
        if not ok:
            self.record_mistake(mistake or MistakeKind.ENV_ACTION_FAILED, detail=detail)
            return
        turn = self.turn_number
        self._steps.append(StepRecord(turn, ok=True, progress=progress))
        recovery = self._tracker.success(turn)
        if recovery is not None:
            self._trace.recovery(self._turn_span, recovery)
        self._check_early_stop()

    def _check_early_stop(self) -> None:
        policy = self.controller.early_stop
        if policy is None or self._machine.early_stop is not None:
            return
        reason = policy.check(self)
        if self._machine.stopped_early(reason):
            self._event(sc.BM_EVENT_EARLY_STOP, "early_stop", {"reason": reason})

    # -- budget changes, children, transcript ------------------------------------------
    def grant(self, **extra: float) -> None:
        """Extend limits at run time (``grant(turns=3)``); recorded as an event.

        All or nothing: an error leaves every limit as it was.

        Raises:
            ConfigError: unknown dimension, an amount that is not positive and finite
                (or fractional for a count), an unlimited dimension, or a new limit above
                the dimension's maximum (2**53 for counts); the message names it.
        """
        limits = self.ledger.grant(**extra)
        self._grants += 1
        if self._machine.exhausted is not None and self.ledger.blocking_dimension() is None:
            self._machine.unblocked()
        self._event(
            sc.BM_EVENT_EXTENDED,
            "extended",
            {**{f"added_{k}": v for k, v in extra.items()}, "turns_limit": limits["turns"] or 0},
        )

    def child(self, budget: Budget, *, name: str | None = None) -> Episode:
        """A sub-agent episode with its own limits that also draws from this one."""
        return self.controller.episode(
            name=name or f"{self.name}.child",
            budget=budget,
            parent=self,
            conversation_id=self.conversation_id,  # a sub-agent serves the same conversation
        )

    def record_message(self, message: Any) -> None:
        """Keep a message in the transcript that budget errors carry."""
        self.transcript.append(message)

    # -- ending ------------------------------------------------------------------------
    def set_output(self, output: Any) -> None:
        """Attach an output (e.g. a grace turn's best-effort answer) without ending the
        episode; it becomes ``result.final_output``."""
        self._output = output

    def finish(self, success: bool, output: Any = None) -> EpisodeResult:
        """End the episode as a success or a failure (before the ``with`` block exits).

        A failure after a limit refused a turn (or an early stop) keeps that cause:
        status ``budget_exhausted`` (``early_stopped``) with its ``stop_reason``.

        Raises:
            BudgetmixError: the episode already finished.
        """
        if self._machine.status is not None:
            raise BudgetmixError(f"episode {self.id} already finished ({self._machine.status})")
        if success and self._tracker.unrecovered:
            self.record_step(ok=True, progress=True)
        if output is not None:
            self._output = output
        return self._close(self._machine.finishing(success))

    def _close(self, closing: Closing) -> EpisodeResult:
        if not self._machine.close(closing):
            assert self.result is not None
            return self.result
        self._end_turn()
        self.result = EpisodeResult(
            episode_id=self.id,
            name=self.name,
            status=closing.status,
            stop_reason=closing.stop_reason,
            used=self.ledger.counts(),
            limits=self.ledger.limits(),
            mistakes=tuple(self._tracker.mistakes),
            recoveries=tuple(self._tracker.recoveries),
            events=tuple(self._events),
            trace_id=self._trace.trace_id(),
            grace_turn=self._machine.grace_used,
            final_output=self._output,
            error=closing.error,
            metadata=dict(self.metadata),
        )
        self._trace.closed(self.result)
        return self.result

    def _event(self, otel_name: str, kind: str, detail: dict[str, Any]) -> None:
        self._events.append(BudgetEvent(kind=kind, turn=self.turn_number, detail=detail))
        self._trace.budget_event(otel_name, self.turn_number, detail)

    # -- owner protocol (what Turn and ToolCall call) ----------------------------------
    def charge_resend(self) -> None:
        """Charge a turn again before a refunded request is resent.

        Raises:
            BudgetExhausted: a limit refuses it (the extension policy was asked).
        """
        blocked = self.ledger.try_charge_turn()
        if blocked is not None:
            blocked = self._extend(blocked, self.ledger.try_charge_turn)
            if blocked is not None:
                raise self._exhausted_error(blocked)

    def turn_failed(self, detail: str, *, sent: bool, charged: bool) -> bool:
        """A request failed for good: a ``provider_error`` mistake if it was ``sent``
        (first: it belongs to the failed turn); the turn's charge given back unless failed
        requests count (always when nothing was sent). ``True``: it was given back."""
        if sent:
            self.record_mistake(MistakeKind.PROVIDER_ERROR, detail=detail)
        if charged and not (sent and self.ledger.accounting.count_failed_requests):
            self.ledger.refund_turn()
            return True
        return False

    def turn_retrying(self, span: Span, attempt: int, exc: BaseException, delay: float) -> None:
        """A failed attempt will be retried: a turn if retries count, a retry event.

        Raises:
            BudgetExhausted: retries count and a limit refuses this one.
        """
        if self.ledger.accounting.count_retries:
            blocked = self.ledger.try_charge_turn()
            if blocked is not None:
                self._refused(blocked)
                raise self._exhausted_error(blocked) from exc
        self._trace.retry(span, attempt, delay, exc)

    def tool_finished(self, call: ToolCall, mistake: MistakeKind | None, detail: str) -> None:
        """``call`` ended: a success is a step; a mistake is recorded (its charge given
        back unless failed calls count)."""
        if mistake is not None:
            if not self.ledger.accounting.count_failed_tool_calls:
                self.ledger.refund_tool_call(call.name)
            self.record_mistake(mistake, tool=call.name, call_id=call.call_id, detail=detail)
        else:
            if call.call_id:
                self._outcomes.add(call.call_id)
            self.record_step(ok=True, progress=True)
        self._trace.tool_result(call)
