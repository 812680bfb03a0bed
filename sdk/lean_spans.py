"""Spans of the OpenTelemetry SDK's tracer at a fraction of its cost, exported as its own.

The SDK's ``Tracer.start_span`` and ``Span`` spend most of a traced turn's cost: a lock
per attribute, every attribute cleaned again, a sampler call, a span processor called at
start that does nothing. :class:`LeanTracer` wraps the controller's tracer and, where the
pipeline lets it, builds a :class:`LeanSpan` instead: the same span context (the provider's
id generator, the sampler's decision), the same attributes, events, links and status under
the same limits, and at :meth:`LeanSpan.end` the same :class:`ReadableSpan` handed to the
provider's span processor. It applies only where that is all the SDK would do:

- the tracer is the SDK's own ``Tracer`` (the global proxy is resolved at each start);
- it is enabled and its internal metrics are off;
- every span processor's ``on_start`` and ``_on_ending`` are the SDK's no-ops (its
  ``SimpleSpanProcessor`` and ``BatchSpanProcessor``, budgetmix's processors, and any
  subclass that keeps them): a processor that reads the live span at start (MLflow's,
  OpenInference's) gets the SDK's spans;
- the span has no start links.

Anything else is the SDK's ``start_span`` unchanged, checked again at every start (a
processor added later applies from the next span). The SDK's default sampler,
``ParentBased(ALWAYS_ON)``, is decided here as it decides (sampled unless the parent is
not); any other sampler is asked. Attribute values of the plain types (``str``, ``bool``,
``int``, ``float``) are stored as given, as the SDK's cleaning stores them; any other
value, key or limit goes through the SDK's own ``BoundedAttributes``.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind
from opentelemetry.util import types

__all__ = ["LeanTracer"]

#: ``record_exception`` and ``set_status_on_exception`` as the API's defaults.
_DEFAULTS = (True, True)


class _Pipeline:
    """What a lean span needs of one SDK tracer."""

    __slots__ = (
        "default_sampler",
        "id_generator",
        "limits",
        "on_end",
        "plain_strings",
        "resource",
        "sampler",
        "scope",
        "start",
        "start_child",
    )

    def __init__(self, tracer: Any) -> None:
        from budgetmix.lean_span import start_lean_child, start_lean_span  # SDK imported now

        self.start: Callable[..., trace.Span] = start_lean_span
        self.start_child: Callable[..., trace.Span] = start_lean_child
        self.sampler = tracer.sampler
        self.default_sampler = _is_default_sampler(tracer.sampler)
        self.id_generator = tracer.id_generator
        self.resource = tracer.resource
        self.scope = tracer._instrumentation_scope
        self.limits = tracer._span_limits
        self.plain_strings = self.limits.max_span_attribute_length is None
        self.on_end = tracer.span_processor.on_end


def _parts(tracer: Any) -> tuple[Any, ...]:
    """What of ``tracer`` may change after it was made (processors are added, a sampler
    or resource is set, the tracer is disabled), compared by identity at each start."""
    return (
        tracer,
        tracer.span_processor._span_processors,
        tracer.sampler,
        tracer.id_generator,
        tracer.resource,
        getattr(tracer, "_tracer_config", None),
    )


def _read(tracer: Any) -> tuple[tuple[Any, ...] | None, _Pipeline | None]:
    """``tracer``'s parts and its pipeline (``None`` where its spans stay the SDK's; no
    parts for a tracer that is not the SDK's, or of another shape than this module's)."""
    sdk = sys.modules.get("opentelemetry.sdk.trace")
    if sdk is None or type(tracer) is not sdk.Tracer:
        return None, None
    try:
        parts = _parts(tracer)
        return parts, (_Pipeline(tracer) if _eligible(tracer) else None)
    except AttributeError:
        return None, None


def _eligible(tracer: Any) -> bool:
    """Whether the SDK would do no more for ``tracer``'s spans than a lean span does."""
    from opentelemetry.sdk.trace import (
        ConcurrentMultiSpanProcessor,
        SpanProcessor,
        SynchronousMultiSpanProcessor,
    )

    if type(tracer.span_processor) not in (
        SynchronousMultiSpanProcessor,
        ConcurrentMultiSpanProcessor,
    ):
        return False
    enabled = getattr(tracer, "_is_enabled", lambda: True)()
    metrics = type(getattr(tracer, "_tracer_metrics", None)).__name__
    if not enabled or metrics not in ("NoOpTracerMetrics", "NoneType"):
        return False
    no_op_start, no_op_ending = _no_op_hooks(SpanProcessor)
    return all(
        getattr(type(p), "on_start", None) in no_op_start
        and getattr(type(p), "_on_ending", SpanProcessor._on_ending) in no_op_ending
        for p in tracer.span_processor._span_processors
    )


def _no_op_hooks(base: type) -> tuple[set[Any], set[Any]]:
    """The SDK's span processors' ``on_start`` and ``_on_ending`` that do nothing."""
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    classes = (base, SimpleSpanProcessor, BatchSpanProcessor)
    return (
        {c.__dict__["on_start"] for c in classes if "on_start" in c.__dict__},
        {c.__dict__["_on_ending"] for c in classes if "_on_ending" in c.__dict__},
    )


def _is_default_sampler(sampler: Any) -> bool:
    """Whether ``sampler`` is the SDK's default, ``ParentBased(ALWAYS_ON)``, exactly."""
    from opentelemetry.sdk.trace import sampling

    if type(sampler) is not sampling.ParentBased:
        return False
    on, off = sampling.ALWAYS_ON, sampling.ALWAYS_OFF
    parts = ("_root", "_remote_parent_sampled", "_local_parent_sampled")
    dropped = ("_remote_parent_not_sampled", "_local_parent_not_sampled")
    return all(getattr(sampler, p, None) is on for p in parts) and all(
        getattr(sampler, p, None) is off for p in dropped
    )


class LeanTracer(trace.Tracer):
    """``inner``'s spans, lean where the pipeline allows (see the module's docstring)."""

    __slots__ = ("_lock", "_pipeline", "inner")

    def __init__(self, inner: trace.Tracer) -> None:
        self.inner = inner
        # the last tracer read: its parts and its pipeline (None: the SDK's spans)
        self._known: tuple[tuple[Any, ...] | None, _Pipeline | None] = (None, None)

    def _resolved(self) -> Any:
        """The tracer that makes the spans now (the global proxy's current one)."""
        inner = self.inner
        if type(inner) is trace.ProxyTracer:
            return getattr(inner, "_tracer", inner)
        return inner

    def _pipeline_of(self, tracer: Any) -> _Pipeline | None:
        parts, pipeline = self._known
        if parts is not None and parts[0] is tracer:
            try:
                now = _parts(tracer)
            except AttributeError:
                return None
            if now == parts:  # item by item, identity first
                return pipeline
        self._known = _read(tracer)
        return self._known[1]

    def start_span(
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: trace._Links = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> trace.Span:
        """A span as ``inner`` would start it: lean where the pipeline allows."""
        tracer = self._resolved()
        pipeline = self._pipeline_of(tracer)
        if pipeline is None or links:
            return tracer.start_span(  # type: ignore[no-any-return]
                name,
                context,
                kind,
                attributes,
                links,
                start_time,
                record_exception,
                set_status_on_exception,
            )
        on_exception = (record_exception, set_status_on_exception)
        return pipeline.start(pipeline, name, context, kind, attributes, start_time, on_exception)

    def start_child(
        self,
        name: str,
        parent: trace.Span,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        start_time: int | None = None,
    ) -> trace.Span:
        """:meth:`start_span` of a child of ``parent``, without building a context for it
        where nothing reads one (a lean span under the default sampler)."""
        tracer = self._resolved()
        pipeline = self._pipeline_of(tracer)
        if pipeline is None or not pipeline.default_sampler:
            context = trace.set_span_in_context(parent)
            return self.start_span(name, context, kind, attributes, None, start_time)
        parent_context = parent.get_span_context()
        if start_time is None:
            return pipeline.start_child(pipeline, name, parent_context, kind, attributes)
        return pipeline.start(
            pipeline, name, None, kind, attributes, start_time, _DEFAULTS, parent_context
        )

    @contextlib.contextmanager
    def start_as_current_span(  # type: ignore[override]
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: trace._Links = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Iterator[trace.Span]:
        """A span from :meth:`start_span`, current inside the block."""
        span = self.start_span(
            name,
            context,
            kind,
            attributes,
            links,
            start_time,
            record_exception,
            set_status_on_exception,
        )
        with trace.use_span(
            span,
            end_on_exit=end_on_exit,
            record_exception=record_exception,
            set_status_on_exception=set_status_on_exception,
        ) as current:
            yield current
