"""What a turn or a tool call writes on its own span, and the GenAI client metrics.

:mod:`budgetmix.instrumentation` writes the episode's span and opens the turns' and
tool calls' spans; :class:`~budgetmix.Turn` and :class:`~budgetmix.ToolCall` write on
theirs through these functions (every name from :mod:`budgetmix.semconv`): usage and
finish reasons, content, errors that explain themselves, the wire's tool spans, the
``gen_ai.client.*`` metric points, and the context that makes a span current while its
work runs (so SDK, HTTP and user spans made meanwhile are its children).
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from budgetmix import semconv as sc
from budgetmix.genai_content import finish_reason
from budgetmix.trace_content import set_content, write_turn_content
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

if TYPE_CHECKING:
    from budgetmix.instrumentation import Instrumentation
    from budgetmix.lean_spans import LeanTracer

__all__ = [
    "add_span_event",
    "call_arguments",
    "chat_attributes",
    "enter_span",
    "exit_span",
    "record_duration",
    "record_tokens",
    "set_error",
    "set_turn_content",
    "set_usage",
    "wire_tool_span",
]


def set_usage(
    span: trace.Span,
    *,
    input_tokens: int,
    output_tokens: int,
    cache_read_tokens: int,
    cache_write_tokens: int,
    response_model: str | None,
    finish_reasons: Sequence[str] | None,
    response_id: str | None = None,
) -> None:
    """A response's usage on its turn's span (finish reasons in the conventions' words:
    Anthropic's ``end_turn`` reads ``stop``, ``tool_use`` ``tool_call``)."""
    span.set_attribute(sc.GEN_AI_USAGE_INPUT_TOKENS, input_tokens)
    span.set_attribute(sc.GEN_AI_USAGE_OUTPUT_TOKENS, output_tokens)
    if cache_read_tokens:
        span.set_attribute(sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, cache_read_tokens)
    if cache_write_tokens:
        span.set_attribute(sc.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS, cache_write_tokens)
    if response_model:
        span.set_attribute(sc.GEN_AI_RESPONSE_MODEL, response_model)
    if finish_reasons:
        reasons = [finish_reason(r) for r in finish_reasons]
        span.set_attribute(sc.GEN_AI_RESPONSE_FINISH_REASONS, reasons)
    if response_id:
        span.set_attribute(sc.GEN_AI_RESPONSE_ID, response_id)


def chat_attributes(provider: str | None, model: str | None) -> dict[str, str]:
    """The attributes of a model call's metric points."""
    attrs = {sc.GEN_AI_OPERATION_NAME: "chat"}
    if provider:
        attrs[sc.GEN_AI_PROVIDER_NAME] = provider
    if model:
        attrs[sc.GEN_AI_REQUEST_MODEL] = model
    return attrs


def record_tokens(
    inst: Instrumentation, attributes: dict[str, str], input_tokens: int, output_tokens: int
) -> None:
    """A response's tokens as ``gen_ai.client.token.usage`` points (one per token type)."""
    inst.m_tokens.record(input_tokens, {**attributes, sc.GEN_AI_TOKEN_TYPE: "input"})
    inst.m_tokens.record(output_tokens, {**attributes, sc.GEN_AI_TOKEN_TYPE: "output"})


def record_duration(
    inst: Instrumentation, attributes: dict[str, str], seconds: float, error: str | None
) -> None:
    """A model call's ``gen_ai.client.operation.duration`` (``error``: its ``error.type``)."""
    if error is not None:
        attributes = {**attributes, sc.ERROR_TYPE: error}
    inst.m_duration.record(seconds, attributes)


def enter_span(span: trace.Span) -> object | None:
    """Make ``span`` the current span (SDK, HTTP and user spans made meanwhile are its
    children); the token for :func:`exit_span`, ``None`` for a span of no trace."""
    if not span.get_span_context().is_valid:
        return None
    return otel_context.attach(trace.set_span_in_context(span))


def exit_span(token: object | None) -> None:
    """Restore the span that was current before :func:`enter_span` (one left in another
    context, an async task's, has nothing to restore)."""
    if isinstance(token, contextvars.Token):  # the default runtime context's token
        with contextlib.suppress(ValueError, RuntimeError):  # another context: nothing
            token.var.reset(token)
    elif token is not None:
        otel_context.detach(token)  # type: ignore[arg-type]


def set_turn_content(
    inst: Instrumentation,
    episode: object,
    span: trace.Span,
    *,
    inputs: Any = None,
    outputs: Any = None,
    system: Any = None,
    finish_reason: Any = None,
    notice: str | None = None,
) -> None:
    """A turn's content in the GenAI conventions' parts format
    (:mod:`budgetmix.genai_content` reads chat, Responses, Anthropic and neutral
    messages), credentials masked; the episode's trace learns its task and answer."""
    parts_in, parts_out = write_turn_content(span, inputs, outputs, system, finish_reason)
    try:
        trace_ = inst.content_traces.get(episode)
    except TypeError:  # a turn owner that is no Episode (cannot be weakly referenced)
        return
    if trace_ is not None:
        trace_.turn_content(parts_in, parts_out, notice)


def add_span_event(
    span: trace.Span, name: str, attributes: Mapping[str, str | int | float | bool] | None
) -> None:
    """An event a caller attaches to a turn (``budgetmix.usage_missing``)."""
    span.add_event(name, dict(attributes or {}))


def set_error(
    span: trace.Span,
    error_type: str,
    *,
    description: str | None = None,
    exc: BaseException | None = None,
) -> None:
    """Mark ``span`` failed with ``error.type``; with ``description`` (the error's text)
    or ``exc``, the span explains itself: that text, credentials masked, as its status
    description and in an ``exception`` event (with ``exc``'s type)."""
    span.set_attribute(sc.ERROR_TYPE, error_type)
    if description is None and exc is None:
        span.set_status(Status(StatusCode.ERROR))
        return
    from budgetmix.events import exception_text
    from budgetmix.telemetry.redaction import redact_text

    if description is None:
        description = exception_text(exc) if exc is not None else error_type
    text = redact_text(description)
    span.set_status(Status(StatusCode.ERROR, text))
    event: dict[str, str] = {
        sc.EXCEPTION_TYPE: type(exc).__name__ if exc is not None else error_type,
        sc.EXCEPTION_MESSAGE: text,
    }
    # no exception.stacktrace: source lines may quote what no trace should hold
    span.add_event(sc.EXCEPTION_EVENT, event)


def wire_tool_span(
    tracer: LeanTracer,
    parent: trace.Span,
    name: str,
    call_id: str,
    *,
    start_ns: int,
    end_ns: int,
    error: str | None,
    content: tuple[Any, Any] | None,
    detail: str = "",
) -> None:
    """One ended ``execute_tool {name}`` span, a child of ``parent`` (the turn whose
    response made the call), for a call the agent ran itself, timed from the wire
    (``budgetmix.tool.timing=wire``: an upper bound); ``error``: its ``error.type``;
    ``content``: ``(arguments, result)``, given only when content is captured;
    ``detail``: a failed call's error text (its status description, masked)."""
    attrs: dict[str, str] = {
        sc.GEN_AI_OPERATION_NAME: "execute_tool",
        sc.GEN_AI_TOOL_NAME: name,
        sc.GEN_AI_TOOL_TYPE: "function",
        sc.GEN_AI_TOOL_CALL_ID: call_id,
        sc.BM_TOOL_TIMING: "wire",
    }
    span = tracer.start_child(
        f"execute_tool {name}", parent, SpanKind.INTERNAL, attrs, start_time=start_ns
    )
    if span.is_recording():
        arguments, result = content if content is not None else (None, None)
        if arguments is not None:
            set_content(span, sc.GEN_AI_TOOL_CALL_ARGUMENTS, arguments)
        if result is not None:
            set_content(span, sc.GEN_AI_TOOL_CALL_RESULT, result)
        if error is not None:
            set_error(span, error, description=detail or error)
    span.end(end_time=end_ns)


def call_arguments(fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    """What ``fn(*args, **kwargs)`` is called with, as a tool call's arguments object:
    by parameter name when ``fn``'s signature binds them, else ``{"args": [...], **kwargs}``."""
    try:
        return dict(inspect.signature(fn).bind(*args, **kwargs).arguments)
    except (TypeError, ValueError):  # no signature, or arguments it does not bind
        return {"args": list(args), **kwargs} if args else dict(kwargs)
