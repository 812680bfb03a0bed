"""An episode: one budgeted run of an agent loop, with its ledger, events and spans."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from budgetmix import semconv as sc
from budgetmix._validate import check_call_ids, check_tool_names
from budgetmix.budget import Budget
from budgetmix.events import (
    BudgetEvent,
    EpisodeResult,
    EpisodeStatus,
    Mistake,
    MistakeKind,
    Recovery,
    exception_text,
)
from budgetmix.exceptions import BudgetExhausted, BudgetmixError, EarlyStopped
from budgetmix.hooks import call_hooks
from budgetmix.ledger import Ledger, LedgerState
from budgetmix.notice import render_notice
from budgetmix.policy import StepRecord
from budgetmix.recovery import RecoveryTracker
from budgetmix.spans import (
    add_budget_event,
    add_mistake_event,
    add_recovery_event,
    add_retry_event,
    end_episode_attributes,
    start_tool_spans,
    start_turn_span,
)
from budgetmix.steps import ToolCall, Turn
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan

if TYPE_CHECKING:
    import contextvars

    from budgetmix.controller import BudgetController

__all__ = ["Episode"]


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
    ) -> None:
        self.controller = controller
        self.name = name
        self.id = episode_id
        self.metadata = metadata
        self.conversation_id = conversation_id
        self.parent = parent
        self.ledger: Ledger = Ledger(
            budget,
            parent=parent.ledger if parent is not None else None,
            accounting=controller.accounting,
            clock=controller.clock,
        )
        self.transcript: list[Any] = []
        self.result: EpisodeResult | None = None
        self._tracker = RecoveryTracker()
        self._steps: list[StepRecord] = []
        self._outcomes: set[str] = set()  # tool call ids whose outcome is recorded
        self._events: list[BudgetEvent] = []
        self._hook_errors: list[str] = []
        self._lock = threading.Lock()
        self._turn: Turn | None = None
        self._status: EpisodeStatus | None = None
        self._stop_reason: str | None = None
        self._exhausted: str | None = None
        self._early_stop: str | None = None
        self._grace_used = False
        self._warned = False
        self._grants = 0
        self._output: Any = None
        self._span: trace.Span = trace.INVALID_SPAN
        self._spans_no_op: bool | None = None  # decided once per episode, when first asked
        self._ctx_token: contextvars.Token[Episode | None] | None = None
        self._span_token: object | None = None

    # -- EpisodeView (what policies read) ----------------------------------------------
    @property
    def state(self) -> LedgerState:
        return self.ledger.state(in_turn=self._turn is not None)

    @property
    def mistakes(self) -> Sequence[Mistake]:
        return self._tracker.mistakes

    @property
    def recoveries(self) -> Sequence[Recovery]:
        return self._tracker.recoveries

    @property
    def steps(self) -> Sequence[StepRecord]:
        return self._steps

    @property
    def grants(self) -> int:
        return self._grants

    @property
    def turn_number(self) -> int:
        return int(self.ledger.used("turns"))

    @property
    def finished(self) -> bool:
        return self._status is not None

    # -- context management ------------------------------------------------------------
    def __enter__(self) -> Episode:
        c = self.controller
        self._span = c._start_episode_span(self)
        self._ctx_token = c._enter(self)
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        suppress = False
        if exc is None:
            if self._status is None:
                if self._exhausted is not None:
                    self._close(EpisodeStatus.BUDGET_EXHAUSTED, self._exhausted)
                elif self._early_stop is not None:
                    self._close(EpisodeStatus.EARLY_STOPPED, self._early_stop)
                else:
                    self._close(EpisodeStatus.FAILED, None)
        elif isinstance(exc, BudgetExhausted) and exc.episode_id in (self.id, None):
            self._close(EpisodeStatus.BUDGET_EXHAUSTED, exc.dimension)
            suppress = self.controller.exhaustion != "raise"
        elif isinstance(exc, EarlyStopped) and exc.episode_id in (self.id, None):
            self._close(EpisodeStatus.EARLY_STOPPED, exc.reason)
            suppress = self.controller.exhaustion != "raise"
        else:
            self._close(EpisodeStatus.ERROR, None, error=exception_text(exc))
        if self._ctx_token is not None:
            self.controller._exit(self._ctx_token)
            self._ctx_token = None
        if (
            exc is None
            and self.controller.exhaustion == "raise"
            and self.result is not None
            and self.result.status is EpisodeStatus.BUDGET_EXHAUSTED
        ):
            raise self._exhausted_error(self.result.stop_reason or "turns")
        return suppress

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
            if self._early_stop is not None:
                raise EarlyStopped(self._early_stop, self.id)
            raise self._exhausted_error(self._exhausted or "turns")
        return turn

    def try_begin_turn(self, *, model: str | None = None) -> Turn | None:
        """Like :meth:`begin_turn`, but returns ``None`` where it would raise a budget stop."""
        if self._status is not None:
            raise BudgetmixError(f"episode {self.id} already finished ({self._status})")
        self._end_turn()
        if self._early_stop is not None:
            return None
        if self._exhausted is not None:
            return self._grace_turn(model) if self._grace_allowed() else None
        blocked = self.ledger.try_charge_turn()
        if blocked is not None:
            blocked = self._extend_and_retry(blocked, self.ledger.try_charge_turn)
        if blocked is not None:
            self._mark_exhausted(blocked)
            return self._grace_turn(model) if self._grace_allowed() else None
        return self._open_turn(model, grace=False)

    def turns(self, *, model: str | None = None) -> Iterator[Turn]:
        """Yield charged turns until the budget (or an early stop) ends the loop."""
        while True:
            turn = self.try_begin_turn(model=model)
            if turn is None:
                return
            with turn:
                yield turn
            if self._status is not None:
                return

    @property
    def notice(self) -> str | None:
        """The notice of the turn in progress (``None`` if none or the policy is silent)."""
        return self._turn.notice if self._turn is not None else None

    def render_notice(self) -> str:
        """The notice for the current state, regardless of the notice policy."""
        return render_notice(self.state, self.controller.notice.format)

    def _grace_allowed(self) -> bool:
        return (
            self.controller.exhaustion == "grace"
            and not self._grace_used
            and self._exhausted == "turns"
        )

    def _open_turn(self, model: str | None, *, grace: bool) -> Turn:
        c = self.controller
        state = self.ledger.state(in_turn=True)
        notice: str | None = None
        if grace or c.notice.should_notify(state):
            notice = render_notice(state, c.notice.format)
        number = state.turn_number + (1 if grace else 0)
        span = self._no_op_child()
        if span is None:
            span = start_turn_span(
                c.tracer,
                self._span,
                number=number,
                model=model,
                provider=c.provider_name,
                conversation_id=self.conversation_id,
            )
        turn = Turn(self, number, model, notice, span, grace=grace)
        if turn._recording:
            span.set_attribute(sc.bm_remaining("turns"), state.turns_remaining - 1)
            if grace:
                span.set_attribute("budgetmix.grace_turn", True)
        self._turn = turn
        if not grace:
            self._maybe_warn(state)
            call_hooks(c.hooks, "on_turn", self, number)
        return turn

    def _no_op_child(self, parent: trace.Span | None = None) -> trace.Span | None:
        """What the OpenTelemetry no-op tracer returns for a child of ``parent`` (the
        non-recording parent itself), without building the context and attributes it
        would drop; ``None`` when a real tracer may record the child."""
        parent = self._span if parent is None else parent
        if not isinstance(parent, NonRecordingSpan):
            return None
        if self._spans_no_op is None:  # a provider installed mid-episode applies from the next
            self._spans_no_op = self.controller.tracer_is_no_op()
        return parent if self._spans_no_op else None

    def _grace_turn(self, model: str | None) -> Turn:
        self._grace_used = True
        self._event(sc.BM_EVENT_GRACE, "grace_turn", {})
        return self._open_turn(model, grace=True)

    def _end_turn(self) -> None:
        if self._turn is not None:
            self._turn.end()
            self._turn = None

    def _maybe_warn(self, state: LedgerState) -> None:
        if self._warned or self.controller.warn_fraction <= 0:
            return
        if state.in_last_share(self.controller.warn_fraction):
            self._warned = True
            self._event(sc.BM_EVENT_WARNING, "warning", {"turns_remaining": state.turns_remaining})
            call_hooks(self.controller.hooks, "on_budget_warning", self, state)

    def _extend_and_retry(self, blocked: str, charge: Callable[[], str | None]) -> str | None:
        """Ask the extension policy once per refusing dimension, retrying the charge
        after each grant; returns what still refuses (a grant that does not unblock,
        e.g. when a parent's limit refuses, must not loop forever)."""
        asked: set[str] = set()
        current: str | None = blocked
        while current is not None and current not in asked:
            asked.add(current)
            if self._ask_extension(current) is None:
                break
            current = charge()
        return current

    def _ask_extension(self, dimension: str) -> dict[str, float] | None:
        ext = self.controller.extension
        if ext is None:
            return None
        grant = ext.on_limit(self, dimension)
        if not grant:
            return None
        self.grant(**grant)
        return grant

    def _mark_exhausted(self, dimension: str) -> None:
        if self._exhausted is None:
            self._exhausted = dimension
            self._event(sc.BM_EVENT_EXHAUSTED, "exhausted", {"dimension": dimension})
            self.controller.m_exhaustions.add(1, {"dimension": dimension})
            call_hooks(self.controller.hooks, "on_exhausted", self, dimension)

    def _exhausted_error(self, dimension: str) -> BudgetExhausted:
        return BudgetExhausted(
            dimension,
            self.ledger.counts(),
            self.ledger.limits(),
            transcript=self.transcript,
            episode_id=self.id,
        )

    def _wall_left(self) -> float | None:
        # the tightest wall budget up the chain: a sub-agent's retries must not
        # sleep past its caller's deadline either
        left: float | None = None
        for node in self.ledger.chain():
            lim = node.limit("wall_seconds")
            if lim is not None:
                rem = max(0.0, lim - node.elapsed())
                left = rem if left is None else min(left, rem)
        return left

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
        ids = check_call_ids(names, call_ids)
        if names and self._turn is not None and self._turn.grace:
            # the grace turn is a tool-less wrap-up: its tool calls would need another turn
            raise self._exhausted_error(self._exhausted or "turns")
        blocked = self.ledger.try_charge_tool_batch(names)
        if blocked is not None:
            blocked = self._extend_and_retry(
                blocked, lambda: self.ledger.try_charge_tool_batch(names)
            )
        if blocked is not None:
            self._mark_exhausted(blocked)
            raise self._exhausted_error(blocked)
        parent = self._turn._span if self._turn is not None else self._span
        turn = self.turn_number
        no_op = self._no_op_child(parent)
        if no_op is not None:
            return [
                ToolCall(self, name, cid, turn, no_op) for name, cid in zip(names, ids, strict=True)
            ]
        spans = start_tool_spans(self.controller.tracer, parent, names, ids)
        return [
            ToolCall(self, name, cid, turn, span)
            for name, cid, span in zip(names, ids, spans, strict=True)
        ]

    def tool_call(self, name: str, call_id: str | None = None) -> ToolCall:
        """A batch of one."""
        return self.tool_batch([name], [call_id])[0]

    def _tool_finished(self, call: ToolCall, *, mistake: MistakeKind | None, detail: str) -> None:
        if mistake is not None:
            if not self.ledger.accounting.count_failed_tool_calls:
                self.ledger.refund_tool_call(call.name)
            self.record_mistake(mistake, tool=call.name, call_id=call.call_id, detail=detail)
        else:
            if call.call_id:
                self._outcomes.add(call.call_id)
            self.record_step(ok=True, progress=True)
        call_hooks(self.controller.hooks, "on_tool_result", self, call)

    def record_tool_result(
        self, call_id: str, *, ok: bool, tool: str | None = None, detail: str = ""
    ) -> bool:
        """Record the outcome of a tool call the episode did not run through
        :meth:`tool_call` (the adapters read them from the tool results a request
        carries): a success is a step that may complete a recovery, a failure a
        ``tool_error`` mistake. Once per call id: returns ``False`` when that call's
        outcome is already known (from here, a :class:`ToolCall`, or a mistake)."""
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

        Raises:
            ConfigError: ``kind`` is not a :class:`MistakeKind` (or its value), or
                ``detail``, ``tool``, ``call_id`` of the wrong type; nothing is recorded.
        """
        m = self._tracker.mistake(kind, self.turn_number, tool=tool, call_id=call_id, detail=detail)
        if call_id:
            self._outcomes.add(call_id)
        self._steps.append(StepRecord(self.turn_number, ok=False, mistake=str(m.kind)))
        span = self._current_span()
        if span.is_recording():
            add_mistake_event(span, m, tool=tool, call_id=call_id)
        self.controller.m_mistakes.add(1, {"kind": str(m.kind)})
        call_hooks(self.controller.hooks, "on_mistake", self, m)
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
        self._steps.append(StepRecord(self.turn_number, ok=True, progress=progress))
        recovery = self._tracker.success(self.turn_number)
        if recovery is not None:
            span = self._current_span()
            if span.is_recording():
                add_recovery_event(span, recovery)
            self.controller.m_recoveries.add(1)
            call_hooks(self.controller.hooks, "on_recovery", self, recovery)
        self._check_early_stop()

    def _check_early_stop(self) -> None:
        policy = self.controller.early_stop
        if policy is None or self._early_stop is not None:
            return
        reason = policy.check(self)
        if reason:
            self._early_stop = reason
            self._event("budgetmix.early_stop", "early_stop", {"reason": reason})

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
        if self._exhausted is not None and self.ledger.blocking_dimension() is None:
            self._exhausted = None
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
        if self._status is not None:
            raise BudgetmixError(f"episode {self.id} already finished ({self._status})")
        if success and self._tracker.unrecovered:
            self.record_step(ok=True, progress=True)
        if output is not None:
            self._output = output
        if success:
            return self._close(EpisodeStatus.SUCCESS, None)
        if self._exhausted is not None:
            return self._close(EpisodeStatus.BUDGET_EXHAUSTED, self._exhausted)
        if self._early_stop is not None:
            return self._close(EpisodeStatus.EARLY_STOPPED, self._early_stop)
        return self._close(EpisodeStatus.FAILED, None)

    def _close(
        self, status: EpisodeStatus, stop_reason: str | None, *, error: str | None = None
    ) -> EpisodeResult:
        if self.result is not None:
            return self.result
        self._end_turn()
        self._status = status
        used = self.ledger.counts()
        span = self._span
        trace_id = None
        ctx = span.get_span_context()
        if ctx.is_valid:
            trace_id = format(ctx.trace_id, "032x")
        self.result = EpisodeResult(
            episode_id=self.id,
            name=self.name,
            status=status,
            stop_reason=stop_reason,
            used=used,
            limits=self.ledger.limits(),
            mistakes=tuple(self._tracker.mistakes),
            recoveries=tuple(self._tracker.recoveries),
            events=tuple(self._events),
            trace_id=trace_id,
            grace_turn=self._grace_used,
            final_output=self._output,
            error=error,
            metadata=dict(self.metadata),
        )
        if span.is_recording():
            end_episode_attributes(
                span,
                status=str(status),
                stop_reason=stop_reason,
                mistakes=len(self._tracker.mistakes),
                recoveries=len(self._tracker.recoveries),
                used=used,
                limits=self.ledger.limits(),
                error=(error or "error") if status is EpisodeStatus.ERROR else None,
            )
        span.end()
        self.controller.m_turns.record(used["turns"], {"status": str(status)})
        call_hooks(self.controller.hooks, "on_finish", self, self.result)
        return self.result

    # -- internals ---------------------------------------------------------------------
    def _current_span(self) -> trace.Span:
        return self._turn._span if self._turn is not None else self._span

    def _event(self, otel_name: str, kind: str, detail: dict[str, Any]) -> None:
        self._events.append(BudgetEvent(kind=kind, turn=self.turn_number, detail=detail))
        if self._span.is_recording():
            add_budget_event(self._span, otel_name, self.turn_number, detail)

    def _provider_failure(self, turn: Turn, exc: BaseException) -> None:
        # record first: the mistake belongs to the turn that failed, not the one before
        self.record_mistake(MistakeKind.PROVIDER_ERROR, detail=type(exc).__name__)
        # refund only a charge the turn holds: never twice, never for a grace turn
        if turn._charged and not self.ledger.accounting.count_failed_requests:
            self.ledger.refund_turn()
            turn._charged = False

    def _charge_again(self, turn: Turn) -> None:
        """Re-charge a turn whose failed request was refunded, before it is resent."""
        if turn._charged or turn.grace:
            return
        blocked = self.ledger.try_charge_turn()
        if blocked is not None:
            blocked = self._extend_and_retry(blocked, self.ledger.try_charge_turn)
        if blocked is not None:
            self._mark_exhausted(blocked)
            raise self._exhausted_error(blocked)
        turn._charged = True

    def _on_retry(self, turn: Turn, attempt: int, exc: BaseException, delay: float) -> None:
        if self.ledger.accounting.count_retries:
            blocked = self.ledger.try_charge_turn()
            if blocked is not None:
                self._mark_exhausted(blocked)
                raise self._exhausted_error(blocked) from exc
        if turn._span.is_recording():
            add_retry_event(turn._span, attempt, delay, exc)
