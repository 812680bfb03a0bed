"""The lean span: what :class:`~budgetmix.lean_spans.LeanTracer` starts for an SDK
pipeline, ended as the SDK's own spans end (``budgetmix.lean_spans`` says when it applies).
Imported only once an SDK tracer made a span: the SDK is imported by then."""

from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Mapping, Sequence
from time import time_ns
from types import MappingProxyType, TracebackType
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.context import Context
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanLimits
from opentelemetry.sdk.util import BoundedList
from opentelemetry.trace import (
    Link,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
)
from opentelemetry.util import types

if TYPE_CHECKING:
    from budgetmix.lean_spans import _Pipeline

__all__ = ["LeanSpan", "start_lean_child", "start_lean_span"]

# the SDK's own logger: a misuse warns where the SDK's spans warn
_sdk_log = logging.getLogger("opentelemetry.sdk.trace")

_PLAIN = frozenset({str, bool, int, float})
_RANDOM = getattr(TraceFlags, "RANDOM_TRACE_ID", 0)
#: The flags a span gets, by (sampled | random trace id << 1), as the SDK makes them
#: (an API without the random-trace-id flag: never set).
_FLAGS = tuple(TraceFlags((i & 1) | (_RANDOM if i & 2 else 0)) for i in range(4))
_UNSET = Status(StatusCode.UNSET)
_NO_ATTRIBUTES: Mapping[str, Any] = MappingProxyType({})
# ends spans one at a time: a span ended twice at once is handed on once
_END_LOCK = threading.Lock()


class _Current:
    """The parent is the span current in the context given (the default)."""


_CURRENT = _Current()


def start_lean_span(
    p: _Pipeline,
    name: str,
    context: Context | None,
    kind: SpanKind,
    attributes: types.Attributes,
    start_time: int | None,
    on_exception: tuple[bool, bool],
    parent: SpanContext | _Current | None = _CURRENT,
) -> trace.Span:
    """The SDK's ``Tracer.start_span`` for ``p``'s pipeline, without links. ``parent``:
    the parent's span context when the caller has it (then ``context`` is not read; only
    for the default sampler, which reads no context)."""
    if isinstance(parent, _Current):
        parent = trace.get_current_span(context).get_span_context()
    if parent is None or not parent.is_valid:
        return _start_root(p, name, context, kind, attributes, start_time, on_exception)
    extra: Mapping[str, Any] | None = None
    if p.default_sampler:  # ParentBased(ALWAYS_ON): the parent's decision
        flags = _FLAGS[parent.trace_flags & 3]  # sampled as the parent, random id as its id
        recording = parent.trace_flags & 1
        trace_state = parent.trace_state
    else:
        result = p.sampler.should_sample(context, parent.trace_id, name, kind, attributes, ())
        recording = result.decision.is_recording()
        sampled = result.decision.is_sampled()
        random_id = getattr(parent.trace_flags, "random_trace_id", False)
        flags = _FLAGS[sampled | (2 if random_id else 0)]
        trace_state, extra = result.trace_state, result.attributes
    kept = attributes if extra is None else extra
    return _made(p, name, parent.trace_id, parent, kind, (flags, trace_state, recording), kept,
                 start_time, on_exception)  # fmt: skip


def start_lean_child(
    p: _Pipeline, name: str, parent: SpanContext, kind: SpanKind, attributes: types.Attributes
) -> trace.Span:
    """:func:`start_lean_span` of a child of ``parent`` started now, for the default
    sampler (the parent's decision), with the API's exception defaults: the turn's path,
    made in one call."""
    if not p.default_sampler or not parent.is_valid:
        return start_lean_span(p, name, None, kind, attributes, None, (True, True), parent)
    flags = parent.trace_flags
    context = SpanContext(
        parent.trace_id,
        p.id_generator.generate_span_id(),
        False,
        _FLAGS[flags & 3],  # sampled as the parent, random id as its id
        parent.trace_state,
    )
    if not flags & 1:
        return trace.NonRecordingSpan(context)
    span = LeanSpan(p, name, context, parent, kind)
    if attributes:
        span._set_mapping(attributes)
    span._start_time = time_ns()
    return span


def _start_root(
    p: _Pipeline,
    name: str,
    context: Context | None,
    kind: SpanKind,
    attributes: types.Attributes,
    start_time: int | None,
    on_exception: tuple[bool, bool],
) -> trace.Span:
    """A span with no valid parent: a new trace."""
    trace_id = p.id_generator.generate_trace_id()
    extra: Mapping[str, Any] | None = None
    sampled = recording = True  # the default sampler's root: ALWAYS_ON
    trace_state = None
    if not p.default_sampler:
        result = p.sampler.should_sample(context, trace_id, name, kind, attributes, ())
        sampled, recording = result.decision.is_sampled(), result.decision.is_recording()
        trace_state, extra = result.trace_state, result.attributes
    random_id = p.id_generator.is_trace_id_random()
    flags = _FLAGS[bool(sampled) | (2 if random_id else 0)]
    kept = attributes if extra is None else extra
    return _made(p, name, trace_id, None, kind, (flags, trace_state, recording), kept,
                 start_time, on_exception)  # fmt: skip


def _made(
    p: _Pipeline,
    name: str,
    trace_id: int,
    parent: SpanContext | None,
    kind: SpanKind,
    decision: tuple[TraceFlags, TraceState | None, Any],
    attributes: types.Attributes,
    start_time: int | None,
    on_exception: tuple[bool, bool],
) -> trace.Span:
    """The span the sampler's ``decision`` (flags, trace state, recording) makes: a lean
    span, or a non-recording one."""
    flags, trace_state, recording = decision
    context = SpanContext(trace_id, p.id_generator.generate_span_id(), False, flags, trace_state)
    if not recording:
        return trace.NonRecordingSpan(context)
    return LeanSpan(p, name, context, parent, kind, on_exception).started(attributes, start_time)


def _plain_event_attributes(
    attributes: types.Attributes, limits: SpanLimits
) -> Mapping[str, Any] | None:
    """An event's attributes as ``BoundedAttributes`` would keep them, read-only, where
    that is a plain copy: scalar values under non-empty string keys, within the count limit,
    strings untruncated (no limit on their length). ``None`` otherwise (the SDK's code
    cleans them)."""
    if not attributes:
        return _NO_ATTRIBUTES
    maxlen = limits.max_event_attributes
    if maxlen is not None and len(attributes) > maxlen:
        return None
    strings_kept = limits.max_attribute_length is None
    for key, value in attributes.items():
        kind = type(value)
        if type(key) is not str or not key or kind not in _PLAIN:
            return None
        if kind is str and not strings_kept:
            return None
    return MappingProxyType(dict(attributes))


class LeanSpan(trace.Span, ReadableSpan):
    """A recording span of an SDK pipeline; ends as the SDK's spans end (see the module)."""

    def __init__(
        self,
        pipeline: _Pipeline,
        name: str,
        context: SpanContext,
        parent: SpanContext | None,
        kind: SpanKind,
        on_exception: tuple[bool, bool] = (True, True),
    ) -> None:
        # ReadableSpan's fields, set here: its __init__ would build an empty Resource
        self._name = name
        self._context = context
        self._kind = kind
        self._parent = parent
        self._resource = pipeline.resource
        self._instrumentation_scope = pipeline.scope
        self._end_time: int | None = None
        self._attributes: dict[str, Any] = {}
        self._pipeline = pipeline
        if on_exception != (True, True):
            self._record_exception, self._set_status_on_exception = on_exception

    # the rest of a new span's state, shared until set
    _status = _UNSET
    _start_time: int | None = None
    _events: BoundedList[Event] | Sequence[Event] = ()
    _links: BoundedList[Link] | Sequence[Link] = ()
    _dropped = 0
    _record_exception = True
    _set_status_on_exception = True

    def started(self, attributes: types.Attributes, start_time: int | None) -> LeanSpan:
        """The span with its start attributes, started now (or at ``start_time``)."""
        if attributes:
            self._set_mapping(attributes)
        self._start_time = start_time if start_time is not None else time_ns()
        return self

    def __repr__(self) -> str:
        return f'{type(self).__name__}(name="{self._name}", context={self._context})'

    def _set_mapping(self, attributes: Mapping[str, Any]) -> None:
        """``attributes`` as ``BoundedAttributes`` takes a mapping (a key that is not a
        string is made one where it can be)."""
        attrs = self._attributes
        maxlen = self._pipeline.limits.max_span_attributes
        if self._pipeline.plain_strings and (
            maxlen is None or len(attrs) + len(attributes) <= maxlen
        ):
            for key, value in attributes.items():
                if type(key) is not str or not key or type(value) not in _PLAIN:
                    break
            else:  # the usual case: plain values under string keys, within the limit
                if not attrs:
                    self._attributes = dict(attributes)
                    return
                for key in attributes:  # a key set again moves to the end, as _put does
                    attrs.pop(key, None)
                attrs.update(attributes)
                return
        if not all(type(k) is str and k for k in attributes):
            cleaned = BoundedAttributes(
                None, attributes, max_value_len=self._pipeline.limits.max_span_attribute_length
            )
            self._dropped += cleaned.dropped
            attributes = cleaned
        for key, value in attributes.items():
            self._put(key, value)

    def _put(self, key: str, value: Any) -> None:
        """One attribute under a valid key, as ``BoundedAttributes`` stores it."""
        limits = self._pipeline.limits
        maxlen = limits.max_span_attributes
        if maxlen == 0:
            self._dropped += 1
            return
        if type(value) not in _PLAIN or (
            type(value) is str and not self._pipeline.plain_strings
        ):  # cleaned by the SDK's own code (sequences, mappings, truncation, others)
            value = BoundedAttributes(
                None, {key: value}, max_value_len=limits.max_span_attribute_length
            )[key]
        attrs = self._attributes
        if key in attrs:
            del attrs[key]
        elif maxlen is not None and len(attrs) >= maxlen:
            _sdk_log.warning(
                "Attributes dict is full. Dropping the oldest key-value pair from attributes "
                "to make space for the new key-value pair."
            )
            del attrs[next(iter(attrs))]
            self._dropped += 1
        attrs[key] = value

    # -- the Span API ------------------------------------------------------------------
    def get_span_context(self) -> SpanContext:
        """The span's context (its ids, flags and trace state)."""
        return self._context  # type: ignore[return-value]  # never None here

    def is_recording(self) -> bool:
        """True until the span ends."""
        return self._end_time is None

    def set_attribute(self, key: str, value: types.AttributeValue) -> None:
        """Set one attribute, as the SDK's span does (a bad key is dropped and counted)."""
        if self._end_time is not None:
            _sdk_log.warning("Setting attribute on ended span.")
            return
        if type(key) is not str or not key:
            _sdk_log.warning(
                "invalid key `%s`. must be non-empty string. Dropping key from attributes.", key
            )
            self._dropped += 1
            return
        self._put(key, value)

    def set_attributes(self, attributes: Mapping[str, types.AttributeValue]) -> None:
        """Set several attributes, as the SDK's span does."""
        if self._end_time is not None:
            _sdk_log.warning("Setting attribute on ended span.")
            return
        self._set_mapping(attributes)

    def _ended(self, what: str) -> bool:
        if self._end_time is None:
            return False
        _sdk_log.warning("Tried calling %s on an ended span.", what)
        return True

    def add_event(
        self, name: str, attributes: types.Attributes = None, timestamp: int | None = None
    ) -> None:
        """Add an event under the event limits, as the SDK's span does."""
        if self._ended("_add_event"):
            return
        limits = self._pipeline.limits
        if not isinstance(self._events, BoundedList):
            self._events = BoundedList(limits.max_events)
        plain = _plain_event_attributes(attributes, limits)
        if plain is None:
            plain = BoundedAttributes(
                limits.max_event_attributes,
                attributes,
                max_value_len=limits.max_attribute_length,
                immutable=True,
            )
        self._events.append(Event(name=name, attributes=plain, timestamp=timestamp))

    def add_link(self, context: SpanContext, attributes: types.Attributes = None) -> None:
        """Add a link under the link limits, as the SDK's span does."""
        if not (context and (context.is_valid or (attributes or context.trace_state))):
            return
        if self._ended("_add_link"):
            return
        limits = self._pipeline.limits
        if not isinstance(self._links, BoundedList):
            self._links = BoundedList(limits.max_links)
        bounded = BoundedAttributes(
            limits.max_link_attributes,
            attributes,
            max_value_len=limits.max_attribute_length,
            immutable=True,
        )
        self._links.append(Link(context=context, attributes=bounded))

    def update_name(self, name: str) -> None:
        """Rename the span (not once it ended)."""
        if not self._ended("update_name"):
            self._name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        """Set the status; ``OK`` is final and ``UNSET`` is ignored, as in the SDK."""
        if self._ended("set_status"):
            return
        current = self._status.status_code
        if isinstance(status, Status):
            if current is StatusCode.OK or status.status_code is StatusCode.UNSET:
                return
            if description is not None:
                _sdk_log.warning(
                    "Description %s ignored. Use either `Status` or `(StatusCode, Description)`",
                    description,
                )
            self._status = status
        elif isinstance(status, StatusCode):
            if current is StatusCode.OK or status is StatusCode.UNSET:
                return
            self._status = Status(status, description)

    def record_exception(
        self,
        exception: BaseException,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        """Record ``exception`` as an ``exception`` event, as the SDK's span does."""
        module = type(exception).__module__
        qualname = type(exception).__qualname__
        found: dict[str, Any] = {
            "exception.type": f"{module}.{qualname}"
            if module and module != "builtins"
            else qualname,
            "exception.message": str(exception),
            "exception.stacktrace": "".join(traceback.format_exception(exception)),
            "exception.escaped": str(escaped),
        }
        if attributes:
            found.update(attributes)
        self.add_event("exception", found, timestamp)

    def end(self, end_time: int | None = None) -> None:
        """End the span and hand its snapshot to the pipeline's span processor."""
        with _END_LOCK:
            if self._end_time is not None:
                _sdk_log.warning("Calling end() on an ended span.")
                return
            self._end_time = end_time if end_time is not None else time_ns()
        # the span itself is the snapshot the SDK would copy: nothing changes it now
        self._pipeline.on_end(self)

    @property
    def attributes(self) -> types.Attributes:
        """The span's attributes (read-only; ``BoundedAttributes`` once any was dropped,
        as the SDK's)."""
        if self._dropped:
            bounded = BoundedAttributes(None, self._attributes, immutable=True)
            bounded.dropped = self._dropped
            return MappingProxyType(bounded)
        return MappingProxyType(self._attributes)

    @property
    def dropped_attributes(self) -> int:
        """Attributes dropped by the limits or for a bad key."""
        return self._dropped

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        if exc_val is not None and self.is_recording():
            if self._record_exception:
                self.record_exception(exception=exc_val, escaped=True)
            if self._set_status_on_exception:
                self.set_status(Status(StatusCode.ERROR, f"{type(exc_val).__name__}: {exc_val}"))
        super().__exit__(exc_type, exc_val, exc_tb)
