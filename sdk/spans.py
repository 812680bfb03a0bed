"""What an episode writes on its spans: the trace shape, apart from the control logic.

:class:`~budgetmix.episode.Episode` decides when a turn, tool call, mistake or
recovery happens; these functions turn each into spans, attributes and events
(GenAI semantic conventions plus the ``budgetmix.*`` namespace, see
:mod:`budgetmix.semconv`). Callers only call them for spans that record, so a
no-op tracer costs nothing here. ``tests/sdk/test_otel_shapes.py`` pins the shapes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from budgetmix import semconv as sc
from budgetmix.budget import DIMENSIONS
from budgetmix.events import Mistake, Recovery
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

__all__ = [
    "add_budget_event",
    "add_mistake_event",
    "add_recovery_event",
    "add_retry_event",
    "end_episode_attributes",
    "set_error",
    "start_tool_spans",
    "start_turn_span",
]


def start_turn_span(
    tracer: trace.Tracer,
    parent: trace.Span,
    *,
    number: int,
    model: str | None,
    provider: str | None,
    conversation_id: str | None,
) -> trace.Span:
    """A turn's ``chat {model}`` client span; operation, provider and model go in at span
    start, where samplers read them."""
    attrs: dict[str, str | int] = {sc.GEN_AI_OPERATION_NAME: "chat", sc.BM_TURN: number}
    if provider:
        attrs[sc.GEN_AI_PROVIDER_NAME] = provider
    if conversation_id:
        attrs[sc.GEN_AI_CONVERSATION_ID] = conversation_id
    if model:
        attrs[sc.GEN_AI_REQUEST_MODEL] = model
    return tracer.start_span(
        f"chat {model}" if model else "chat",
        context=trace.set_span_in_context(parent),
        kind=SpanKind.CLIENT,
        attributes=attrs,
    )


def start_tool_spans(
    tracer: trace.Tracer,
    parent: trace.Span,
    names: Sequence[str],
    call_ids: Sequence[str | None],
) -> list[trace.Span]:
    """One ``execute_tool {name}`` span per call of a batch, children of ``parent``."""
    ctx = trace.set_span_in_context(parent)
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
            tracer.start_span(
                f"execute_tool {name}", context=ctx, kind=SpanKind.INTERNAL, attributes=attrs
            )
        )
    return spans


def add_mistake_event(
    span: trace.Span, mistake: Mistake, *, tool: str | None, call_id: str | None
) -> None:
    """The ``budgetmix.mistake`` event."""
    attrs: dict[str, str | int] = {
        "budgetmix.mistake.id": mistake.id,
        "budgetmix.mistake.kind": str(mistake.kind),
        "budgetmix.turn": mistake.turn,
    }
    if tool:
        attrs[sc.GEN_AI_TOOL_NAME] = tool
    if call_id:
        attrs[sc.GEN_AI_TOOL_CALL_ID] = call_id
    span.add_event(sc.BM_EVENT_MISTAKE, attrs)


def add_recovery_event(span: trace.Span, recovery: Recovery) -> None:
    """The ``budgetmix.recovery`` event."""
    span.add_event(
        sc.BM_EVENT_RECOVERY,
        {
            "budgetmix.recovery.id": recovery.id,
            "budgetmix.recovery.recovered": list(recovery.recovered),
            "budgetmix.recovery.turns": recovery.turns_to_recover,
        },
    )


def add_retry_event(span: trace.Span, attempt: int, delay: float, exc: BaseException) -> None:
    """The ``budgetmix.retry`` event: a failed attempt about to be retried after ``delay``."""
    span.add_event(
        sc.BM_EVENT_RETRY,
        {
            "budgetmix.retry.attempt": attempt,
            "budgetmix.retry.delay_s": delay,
            sc.ERROR_TYPE: type(exc).__name__,
        },
    )


def add_budget_event(span: trace.Span, name: str, turn: int, detail: Mapping[str, Any]) -> None:
    """A budget event (warning, exhausted, extended, grace turn, early stop) on the
    episode span: ``budgetmix.turn`` and each detail as ``budgetmix.<key>``."""
    span.add_event(
        name, {"budgetmix.turn": turn, **{f"budgetmix.{k}": v for k, v in detail.items()}}
    )


def end_episode_attributes(
    span: trace.Span,
    *,
    status: str,
    stop_reason: str | None,
    mistakes: int,
    recoveries: int,
    used: Mapping[str, float],
    limits: Mapping[str, float | None],
    error: str | None,
) -> None:
    """The episode span's closing attributes: status, counts, and per dimension the
    usage, limit and what was left; ``error`` (``"Type: message"``) marks the span
    as failed with ``error.type``."""
    span.set_attribute(sc.BM_STATUS, status)
    if stop_reason:
        span.set_attribute(sc.BM_STOP_REASON, stop_reason)
    span.set_attribute(sc.BM_MISTAKES, mistakes)
    span.set_attribute(sc.BM_RECOVERIES, recoveries)
    for dim in DIMENSIONS:
        lim = limits[dim]
        span.set_attribute(sc.bm_used(dim), used[dim])
        if lim is not None:
            span.set_attribute(sc.bm_limit(dim), lim)
            span.set_attribute(sc.bm_remaining(dim), max(0.0, lim - used[dim]))
    if error is not None:
        set_error(span, error.split(":")[0])


def set_error(span: trace.Span, error_type: str) -> None:
    """Mark ``span`` failed with ``error.type``."""
    span.set_attribute(sc.ERROR_TYPE, error_type)
    span.set_status(Status(StatusCode.ERROR))
