"""The one writer of spans, metrics and hooks: the trace shape, apart from the decisions.

:class:`~budgetmix.episode.Episode` (with :mod:`budgetmix.decisions`) decides when a
turn, tool call, mistake, recovery or budget event happens; nothing but this module
turns one into spans, attributes and events (GenAI semantic conventions plus the
``budgetmix.*`` namespace, every name from :mod:`budgetmix.semconv`), into metric
points, or into calls of the :class:`~budgetmix.Hooks`.

* :class:`Instrumentation` - a controller's tracer, metric instruments and hooks;
* :class:`EpisodeTelemetry` - one episode's writer: its span, its turns' and tool calls'
  spans, its events, metrics and hook calls;
* the ``set_*`` functions - what a :class:`~budgetmix.Turn` or
  :class:`~budgetmix.ToolCall` writes on its own span (from :mod:`budgetmix.step_spans`).

An episode's span is current while its block runs (a turn's while its request runs, a
tool call's while ``run`` runs it), so SDK, HTTP and user spans nest under them.

Writes happen only on spans that record, so a no-op tracer costs (almost) nothing
here. ``tests/sdk/test_otel_shapes.py`` pins the shapes.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from budgetmix import bypass
from budgetmix import semconv as sc
from budgetmix._version import __version__
from budgetmix.budget import DIMENSIONS
from budgetmix.events import EpisodeResult, Mistake, Recovery
from budgetmix.genai_content import input_messages, last_text
from budgetmix.hooks import Hooks
from budgetmix.lean_spans import LeanTracer
from budgetmix.ledger import LedgerState
from budgetmix.step_spans import (
    add_span_event,
    enter_span,
    exit_span,
    record_duration,
    record_tokens,
    set_error,
    set_turn_content,
    set_usage,
    wire_tool_span,
)
from budgetmix.trace_content import (
    FAILED_STATUSES,
    set_content,
    set_episode_content,
    set_outcome,
)
from opentelemetry import metrics, trace
from opentelemetry.trace import NonRecordingSpan, SpanKind

if TYPE_CHECKING:
    from budgetmix.episode import Episode
    from budgetmix.steps import ToolCall

__all__ = [
    "FAILED_STATUSES",
    "EpisodeTelemetry",
    "Instrumentation",
    "add_span_event",
    "call_hooks",
    "enter_span",
    "exit_span",
    "record_duration",
    "record_tokens",
    "set_content",
    "set_error",
    "set_turn_content",
    "set_usage",
    "tracer_is_no_op",
    "typed",
    "wire_tool_span",
]

log = logging.getLogger("budgetmix")


_TURNS_REMAINING = sc.bm_remaining("turns")

_COUNTED = frozenset({"turns", "tool_calls", "input_tokens", "output_tokens", "total_tokens"})


def typed(dimension: str, value: float) -> float:
    """``value`` of ``dimension`` as the type its attributes always have: an int for a
    counted dimension (turns, tool calls, tokens), a float for cost and wall time (so
    ``budgetmix.budget.turns.remaining`` is ``0`` at zero, not ``0.0``)."""
    return int(value) if dimension in _COUNTED else float(value)


def tracer_is_no_op(tracer: trace.Tracer) -> bool:
    """True when ``tracer`` can record no span: the API's no-op tracer, or the global
    proxy while no SDK tracer provider is installed (ask again later: one may come)."""
    if isinstance(tracer, LeanTracer):
        tracer = tracer.inner
    if isinstance(tracer, trace.NoOpTracer):
        return True
    return isinstance(tracer, trace.ProxyTracer) and isinstance(
        trace.get_tracer_provider(), trace.ProxyTracerProvider
    )


def call_hooks(
    hooks: Sequence[Hooks], method: str, episode: Episode, errors: list[str], *args: Any
) -> None:
    """Run ``method`` on every hook; an exception is logged and appended to ``errors``,
    never raised (a hook cannot corrupt the ledger or the episode's outcome)."""
    for hook in hooks:
        try:
            getattr(hook, method)(episode, *args)
        except Exception as exc:
            log.warning(
                "budgetmix hook %s.%s raised %s", type(hook).__name__, method, type(exc).__name__
            )
            errors.append(f"{type(hook).__name__}.{method}: {type(exc).__name__}")


#: The turns histogram's buckets: one per small number of turns (an SDK's default
#: buckets, 0, 5, 10, 25, ..., put 1-5 turns in one).
TURN_BUCKETS = (0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 20, 24, 32, 48, 64, 96, 128)
#: The GenAI conventions' advised buckets of ``gen_ai.client.token.usage``.
TOKEN_BUCKETS = tuple(4**i for i in range(14))
#: The GenAI conventions' advised buckets of ``gen_ai.client.operation.duration`` (s).
DURATION_BUCKETS = tuple(0.01 * 2**i for i in range(14))


class Instrumentation:
    """A controller's tracer, metric instruments and hooks (shared by its episodes)."""

    __slots__ = (
        "_meter_given",
        "_meters_until",
        "content_traces",
        "hooks",
        "m_duration",
        "m_exhaustions",
        "m_mistakes",
        "m_recoveries",
        "m_tokens",
        "m_turns",
        "tracer",
    )

    def __init__(
        self,
        hooks: tuple[Hooks, ...],
        *,
        tracer_provider: trace.TracerProvider | None,
        meter_provider: metrics.MeterProvider | None,
    ) -> None:
        self.hooks = hooks
        # the SDK's spans where they do more than a lean span, lean ones elsewhere
        self.tracer = LeanTracer(
            trace.get_tracer("budgetmix", __version__, tracer_provider=tracer_provider)
        )
        meter = metrics.get_meter("budgetmix", __version__, meter_provider=meter_provider)
        self._meter_given = meter_provider is not None
        self._meters_until = -1.0  # meters(): "no" holds until then (monotonic s)
        self.m_turns = meter.create_histogram(
            sc.BM_METRIC_EPISODE_TURNS,
            unit="{turn}",
            description="Turns an episode used, by agent and outcome",
            explicit_bucket_boundaries_advisory=TURN_BUCKETS,
        )
        self.m_exhaustions = meter.create_counter(
            sc.BM_METRIC_EXHAUSTIONS,
            unit="{episode}",
            description="Episodes whose budget refused a turn or a tool batch, by dimension",
        )
        self.m_mistakes = meter.create_counter(
            sc.BM_METRIC_MISTAKES, unit="{mistake}", description="Agent mistakes, by kind"
        )
        self.m_recoveries = meter.create_counter(
            sc.BM_METRIC_RECOVERIES,
            unit="{recovery}",
            description="Successful steps after one or more mistakes",
        )
        self.m_tokens = meter.create_histogram(
            sc.GEN_AI_CLIENT_TOKEN_USAGE,
            unit="{token}",
            description="Number of input and output tokens used",
            explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
        )
        self.m_duration = meter.create_histogram(
            sc.GEN_AI_CLIENT_OPERATION_DURATION,
            unit="s",
            description="GenAI operation duration",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        # the open episodes that capture content, for their turns to tell their task
        # and last reply (only those: nothing is kept when capture is off)
        self.content_traces: WeakKeyDictionary[object, EpisodeTelemetry] = WeakKeyDictionary()

    def meters(self) -> bool:
        """Whether metric points can be recorded now: a meter provider was given, or an
        SDK one is installed globally (the API's own record nothing, so the per-turn
        points are skipped without one; a "no" is asked again after a second, as the
        API's answer reads the environment)."""
        if self._meter_given or self._meters_until < 0:
            return self._meter_given or self._ask_meters()
        return time.monotonic() >= self._meters_until and self._ask_meters()

    def _ask_meters(self) -> bool:
        api = type(metrics.get_meter_provider()).__module__.startswith("opentelemetry.metrics")
        self._meters_until = -1.0 if not api else time.monotonic() + 1.0
        return not api

    def episode_input(self, episode: object, task: Any) -> None:
        """``task`` (a string or messages: the last user text counts) is what the
        episode's span shows as its input, when ``episode`` captures content."""
        try:
            trace_ = self.content_traces.get(episode)
        except TypeError:  # not an Episode: nothing to tell
            return
        if trace_ is not None and isinstance(task, str):
            trace_.task = task
        elif trace_ is not None:
            with contextlib.suppress(Exception):  # an unreadable message: no task shown
                trace_.task = last_text(input_messages(task), "user")


class EpisodeTelemetry:
    """One episode's spans, metric points and hook calls (a hook that raises is listed
    in ``hook_errors``)."""

    __slots__ = (
        "__weakref__",
        "_episode",
        "_errors",
        "_hooks",
        "_inst",
        "_no_op",
        "_token",
        "answer",
        "span",
        "task",
    )

    def __init__(self, inst: Instrumentation, episode: Episode, hook_errors: list[str]) -> None:
        self._inst = inst
        self._episode = episode
        self._hooks = inst.hooks
        self._errors = hook_errors
        self._no_op: bool | None = None  # decided once per episode, when first asked
        self.span: trace.Span = trace.INVALID_SPAN
        self._token: object | None = None  # the context that makes the span current
        self.task: str | None = None  # with content capture: the span's input and output
        self.answer: str | None = None
        if episode.controller.capture_content:
            inst.content_traces[episode] = self

    # -- spans -------------------------------------------------------------------------
    def start(self, parent: EpisodeTelemetry | None) -> None:
        """Open the ``invoke_agent {name}`` span (a child of ``parent``'s, if given) and
        make it current until :meth:`leave`."""
        ctx = trace.set_span_in_context(parent.span) if parent is not None else None
        attrs = None if self._children_no_op() else self._start_attributes()
        name = f"invoke_agent {self._episode.name}"
        self.span = self._inst.tracer.start_span(
            name, context=ctx, kind=SpanKind.INTERNAL, attributes=attrs
        )
        self._token = enter_span(self.span)

    def _start_attributes(self) -> dict[str, str | bool | int | float]:
        """The episode span's attributes known at its start (all given at start: one pass
        in the SDK instead of a call each)."""
        ep = self._episode
        c = ep.controller
        attrs: dict[str, str | bool | int | float] = {
            sc.GEN_AI_OPERATION_NAME: "invoke_agent",
            sc.GEN_AI_AGENT_NAME: ep.name,
            sc.GEN_AI_AGENT_ID: ep.id,
            sc.BM_EPISODE_ID: ep.id,
            sc.BM_NOTICE_FORMAT: c.notice.format,
        }
        if ep.conversation_id:
            attrs[sc.GEN_AI_CONVERSATION_ID] = ep.conversation_id
        if c.provider_name:
            attrs[sc.GEN_AI_PROVIDER_NAME] = c.provider_name
        attrs.update(c.accounting.as_attributes())
        for dim, lim in ep.ledger.limits().items():
            if lim is not None:
                attrs[sc.bm_limit(dim)] = typed(dim, lim)
        return attrs

    def leave(self) -> None:
        """The episode's block was left: its span is current no more."""
        exit_span(self._token)
        self._token = None

    def trace_id(self) -> str | None:
        """The episode's trace id as 32 hex digits (``None`` when no span records)."""
        ctx = self.span.get_span_context()
        return format(ctx.trace_id, "032x") if ctx.is_valid else None

    def _children_no_op(self) -> bool:
        """Whether the children of a non-recording span are the no-op tracer's (that
        span itself): then they are not built, nor their context and attributes. Asked
        once per episode: a provider installed mid-episode applies from the next."""
        if self._no_op is None:
            self._no_op = tracer_is_no_op(self._inst.tracer)
        return self._no_op

    def turn_span(
        self, number: int, model: str | None, grace: bool, turns_remaining: int
    ) -> trace.Span:
        """A turn's ``chat {model}`` client span; every attribute known before the
        request (operation, provider, model, turn, turns left, grace) goes in at span
        start, where samplers read them."""
        parent = self.span
        if isinstance(parent, NonRecordingSpan) and (self._no_op or self._children_no_op()):
            return parent  # what the no-op tracer would return
        ep = self._episode
        attrs: dict[str, str | int | bool] = {
            sc.GEN_AI_OPERATION_NAME: "chat",
            sc.BM_TURN: number,
            _TURNS_REMAINING: turns_remaining,
        }
        provider = ep.controller.provider_name
        if provider:
            attrs[sc.GEN_AI_PROVIDER_NAME] = provider
        if ep.conversation_id:
            attrs[sc.GEN_AI_CONVERSATION_ID] = ep.conversation_id
        if model:
            attrs[sc.GEN_AI_REQUEST_MODEL] = model
        if grace:
            attrs[sc.BM_GRACE_TURN] = True
        # every attribute known now goes in at start: one validation pass in the SDK
        # instead of a locked set_attribute call each
        return self._inst.tracer.start_child(
            f"chat {model}" if model else "chat", parent, SpanKind.CLIENT, attrs
        )

    def tool_spans(
        self, parent: trace.Span | None, names: Sequence[str], call_ids: Sequence[str | None]
    ) -> list[trace.Span]:
        """One ``execute_tool {name}`` span per call of a batch, children of ``parent``
        (the turn's span; the episode's when ``None``)."""
        parent = self.span if parent is None else parent
        if isinstance(parent, NonRecordingSpan) and (self._no_op or self._children_no_op()):
            return [parent] * len(names)  # what the no-op tracer would return
        spans = []
        for name, cid in zip(names, call_ids, strict=True):
            attrs: dict[str, str] = {
                sc.GEN_AI_OPERATION_NAME: "execute_tool",
                sc.GEN_AI_TOOL_NAME: name,
                sc.GEN_AI_TOOL_TYPE: "function",
            }
            if cid:
                attrs[sc.GEN_AI_TOOL_CALL_ID] = cid
            spans.append(
                self._inst.tracer.start_child(
                    f"execute_tool {name}", parent, SpanKind.INTERNAL, attrs
                )
            )
        return spans

    # -- what happened -----------------------------------------------------------------
    def turn_opened(self, number: int) -> None:
        """A model turn was charged (``on_turn``)."""
        if self._hooks:
            call_hooks(self._hooks, "on_turn", self._episode, self._errors, number)

    def warning(self, state: LedgerState) -> None:
        """The remaining turns fell to the warning share (``on_budget_warning``)."""
        if self._hooks:
            call_hooks(self._hooks, "on_budget_warning", self._episode, self._errors, state)

    def exhausted(self, dimension: str) -> None:
        """A limit refused a turn or a tool batch, the first time in the episode: the
        exhaustions metric and ``on_exhausted``."""
        self._inst.m_exhaustions.add(
            1, {"dimension": dimension, sc.GEN_AI_AGENT_NAME: self._episode.name}
        )
        if self._hooks:
            call_hooks(self._hooks, "on_exhausted", self._episode, self._errors, dimension)

    def budget_event(self, name: str, turn: int, detail: Mapping[str, Any]) -> None:
        """A budget event (warning, exhausted, extended, grace turn, early stop) on the
        episode span: ``budgetmix.turn`` and each detail as ``budgetmix.<key>``."""
        if self.span.is_recording():
            attrs = {sc.BM_TURN: turn, **{sc.bm_detail(k): v for k, v in detail.items()}}
            self.span.add_event(name, attrs)

    def mistake(self, span: trace.Span | None, mistake: Mistake) -> None:
        """The ``budgetmix.mistake`` event (on ``span``, the episode's when ``None``),
        its metric point and ``on_mistake``."""
        span = self.span if span is None else span
        if span.is_recording():
            attrs: dict[str, str | int] = {
                sc.BM_MISTAKE_ID: mistake.id,
                sc.BM_MISTAKE_KIND: str(mistake.kind),
                sc.BM_TURN: mistake.turn,
            }
            if mistake.tool:
                attrs[sc.GEN_AI_TOOL_NAME] = mistake.tool
            if mistake.call_id:
                attrs[sc.GEN_AI_TOOL_CALL_ID] = mistake.call_id
            span.add_event(sc.BM_EVENT_MISTAKE, attrs)
        self._inst.m_mistakes.add(
            1, {"kind": str(mistake.kind), sc.GEN_AI_AGENT_NAME: self._episode.name}
        )
        if self._hooks:
            call_hooks(self._hooks, "on_mistake", self._episode, self._errors, mistake)

    def recovery(self, span: trace.Span | None, recovery: Recovery) -> None:
        """The ``budgetmix.recovery`` event, its metric point and ``on_recovery``."""
        span = self.span if span is None else span
        if span.is_recording():
            span.add_event(
                sc.BM_EVENT_RECOVERY,
                {
                    sc.BM_RECOVERY_ID: recovery.id,
                    sc.BM_RECOVERY_RECOVERED: list(recovery.recovered),
                    sc.BM_RECOVERY_TURNS: recovery.turns_to_recover,
                },
            )
        self._inst.m_recoveries.add(1, {sc.GEN_AI_AGENT_NAME: self._episode.name})
        if self._hooks:
            call_hooks(self._hooks, "on_recovery", self._episode, self._errors, recovery)

    def retry(self, span: trace.Span, attempt: int, delay: float, exc: BaseException) -> None:
        """The ``budgetmix.retry`` event: a failed attempt about to be retried after
        ``delay`` seconds."""
        if span.is_recording():
            span.add_event(
                sc.BM_EVENT_RETRY,
                {
                    sc.BM_RETRY_ATTEMPT: attempt,
                    sc.BM_RETRY_DELAY_S: delay,
                    sc.ERROR_TYPE: type(exc).__name__,
                },
            )

    def tool_result(self, call: ToolCall) -> None:
        """A tool call ended (``on_tool_result``)."""
        if self._hooks:
            call_hooks(self._hooks, "on_tool_result", self._episode, self._errors, call)

    def closed(self, result: EpisodeResult) -> None:
        """The episode ended: the span's closing attributes (status, counts, and per
        dimension the usage, limit and what was left; an error marks it failed with
        ``error.type``), the span's end, the turns metric and ``on_finish``."""
        span = self.span
        if span.is_recording():
            attrs: dict[str, str | int | float] = {sc.BM_STATUS: str(result.status)}
            if result.stop_reason:
                attrs[sc.BM_STOP_REASON] = result.stop_reason
            attrs[sc.BM_MISTAKES] = len(result.mistakes)
            attrs[sc.BM_RECOVERIES] = len(result.recoveries)
            used, limits = result.used, result.limits
            for dim in DIMENSIONS:
                lim = limits[dim]
                attrs[sc.bm_used(dim)] = typed(dim, used[dim])
                if lim is not None:
                    attrs[sc.bm_limit(dim)] = typed(dim, lim)
                    attrs[sc.bm_remaining(dim)] = typed(dim, max(0, lim - used[dim]))
            span.set_attributes(attrs)
            set_outcome(span, result)
            if self._episode.controller.capture_content:
                self._inst.content_traces.pop(self._episode, None)
                set_episode_content(span, self.task, self.answer, result.final_output)
        span.end()
        if self._episode.parent is None:  # charged nothing beside a budgeted client: say so
            bypass.episode_closed(self._episode.controller, result)
        self._inst.m_turns.record(
            int(result.used["turns"]),
            {"status": str(result.status), sc.GEN_AI_AGENT_NAME: result.name},
        )
        if self._hooks:
            call_hooks(self._hooks, "on_finish", self._episode, self._errors, result)

    def turn_content(
        self, inputs: list[dict[str, Any]], outputs: list[dict[str, Any]], notice: str | None
    ) -> None:
        """A turn's content (parts format): the first turn's last user text (its budget
        ``notice`` left out) is the episode's task unless one was given; the last
        reply's text its answer."""
        if self.task is None:
            self.task = last_text(inputs, "user", notice=notice)
        answer = last_text(outputs, "assistant")
        if answer is not None:
            self.answer = answer
