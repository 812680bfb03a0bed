"""Lean spans export exactly what the SDK's spans export, and apply only where they may.

``budgetmix.lean_spans`` builds the controller's spans itself where the SDK would do
nothing more than a lean span does (issue 33: tracing's per-turn cost). Each test runs
the same thing twice: once on a pipeline a lean span serves, once on one that forces
the SDK's own spans (a processor with an ``on_start``), and compares everything an
exporter reads. A test that the lean path was taken at all checks the live span's type.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
from budgetmix import Budget, BudgetController
from budgetmix.lean_span import LeanSpan
from budgetmix.lean_spans import LeanTracer
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace import Span as SdkSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ParentBased,
    Sampler,
    SamplingResult,
    TraceIdRatioBased,
)
from opentelemetry.trace import Link, NonRecordingSpan, SpanKind, Status, StatusCode
from opentelemetry.trace.span import TraceState
from opentelemetry.util.types import Attributes


class StartWatcher(SpanProcessor):
    """A processor that reads the live span at start: the SDK's spans must serve it."""

    def __init__(self) -> None:
        self.started: list[str] = []

    def on_start(self, span: SdkSpan, parent_context: Context | None = None) -> None:
        self.started.append(span.name)


class CountingIds(IdGenerator):
    """Ids 1, 2, 3, ...: the two runs of a comparison get the same ones."""

    def __init__(self) -> None:
        self.last = 0

    def generate_span_id(self) -> int:
        self.last += 1
        return self.last

    def generate_trace_id(self) -> int:
        self.last += 1
        return self.last << 64 | 0xFACE  # some low bits, for the ratio sampler

    def is_trace_id_random(self) -> bool:
        return False


def _provider(*, lean: bool, **kwargs: Any) -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({"service.name": "lean-test"}),
        id_generator=CountingIds(),
        **kwargs,
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    if not lean:
        provider.add_span_processor(StartWatcher())
    return provider, exporter


def _timeless(key: str, value: Any) -> tuple[str, Any]:
    """An attribute, a measured wall time replaced by its type (the two runs differ)."""
    return (key, type(value).__name__) if "wall_seconds" in key else (key, value)


def _shape(spans: Sequence[ReadableSpan]) -> list[dict[str, Any]]:
    """Everything an exporter reads of each span, ids replaced by the names they point to."""
    names = {s.context.span_id: s.name for s in spans if s.context is not None}
    traces = {s.context.trace_id for s in spans if s.context is not None}
    assert len(traces) <= 1 or all(s.parent is None for s in spans)
    out = []
    for s in spans:
        assert s.context is not None and s.start_time is not None and s.end_time is not None
        assert s.start_time <= s.end_time
        out.append(
            {
                "name": s.name,
                "kind": s.kind,
                "parent": names.get(s.parent.span_id) if s.parent is not None else None,
                "parent_remote": s.parent.is_remote if s.parent is not None else None,
                "flags": int(s.context.trace_flags),
                "trace_state": s.context.trace_state.to_header(),
                "attributes": [_timeless(k, v) for k, v in (s.attributes or {}).items()],
                "events": [
                    (e.name, list((e.attributes or {}).items()), e.dropped_attributes)
                    for e in s.events
                ],
                "links": [(link.context.span_id, dict(link.attributes or {})) for link in s.links],
                "status": (s.status.status_code, s.status.description),
                "dropped": (s.dropped_attributes, s.dropped_events, s.dropped_links),
                "scope": s.instrumentation_scope,
                "resource": dict(s.resource.attributes),
            }
        )
    return out


def _failing(a: int) -> int:
    raise ValueError(f"no {a}")


def _agent_run(provider: TracerProvider) -> list[type]:
    """A budgeted episode with tools (one fails), a warning and exhaustion, content
    captured, a sub-agent, and a user span inside a tool; returns the live tool spans'
    types."""
    controller = BudgetController(
        Budget(turns=3, tool_calls=4),
        name="lean",
        tracer_provider=provider,
        capture_content=True,
    )
    user = provider.get_tracer("user-code")
    seen: list[type] = []

    def tool(a: int) -> int:
        seen.append(type(trace.get_current_span()))
        with user.start_as_current_span("user work", attributes={"a": a}) as span:
            span.add_event("inside", {"n": a})
        return a + 1

    with controller.episode(episode_id="ep-1", conversation_id="conv-1") as ep:
        for number, turn in enumerate(ep.turns(model="m"), 1):
            turn.openai_chat([{"role": "user", "content": "add"}])
            turn.usage(input_tokens=10 * number, output_tokens=number)
            calls = ep.tool_batch(["add", "bad"], [f"c{number}", f"d{number}"])
            calls[0].run(tool, number)
            with pytest.raises(ValueError):
                calls[1].run(_failing, number)
        with ep.child(Budget(turns=1), name="helper") as sub:
            for turn in sub.turns(model="small"):
                turn.usage(input_tokens=1, output_tokens=1)
        ep.finish(success=True, output="done")
    return seen


@pytest.mark.parametrize("sampler", [None, "adding"], ids=["default sampler", "own sampler"])
def test_an_agent_run_exports_the_same_spans_lean_as_through_the_sdk(
    sampler: str | None,
) -> None:
    kwargs: dict[str, Any] = {} if sampler is None else {"sampler": AddingSampler()}
    lean_provider, lean_out = _provider(lean=True, **kwargs)
    sdk_provider, sdk_out = _provider(lean=False, **kwargs)
    lean_types = _agent_run(lean_provider)
    sdk_types = _agent_run(sdk_provider)
    assert lean_types and set(lean_types) == {LeanSpan}  # the lean path ran
    assert set(sdk_types) <= {SdkSpan, *SdkSpan.__subclasses__()}  # and the SDK's here
    lean, sdk = _shape(lean_out.get_finished_spans()), _shape(sdk_out.get_finished_spans())
    assert [s["name"] for s in lean] == [s["name"] for s in sdk]
    assert len(lean) >= (10 if sampler is None else 3)
    assert any(s["name"] == "user work" for s in lean)
    assert any(e[0].startswith("budgetmix.") for s in lean for e in s["events"])
    assert lean == sdk
    # the user's span is a child of the tool span that was current while it ran
    user_parents = {s["parent"] for s in lean if s["name"] == "user work"}
    if sampler is None:  # (the own sampler records the tool spans without exporting them)
        assert user_parents == {"execute_tool add"}


def _span_by_hand(tracer: trace.Tracer) -> None:
    """Every Span call a caller can make, bad keys, values and limits included."""
    parent = tracer.start_span("parent", attributes={"p": 1})
    ctx = trace.set_span_in_context(parent)
    span = tracer.start_span(
        "child",
        context=ctx,
        kind=SpanKind.CLIENT,
        attributes={"s": "long string value", "i": 1, "f": 1.5, "b": True, "l": [1, 2]},
    )
    span.set_attribute("list", ["x", "y"])
    span.set_attribute("none", None)  # type: ignore[arg-type]
    span.set_attribute("", 1)
    span.set_attribute(3, 1)  # type: ignore[arg-type]
    span.set_attribute("obj", object())  # type: ignore[arg-type]
    span.set_attribute("i", 2)  # moves to the end, as the SDK's does
    span.set_attributes({"m1": 1, "m2": "two", 5: "five", "": 0})  # type: ignore[dict-item]
    span.set_attributes({"m3": 3, "i": 4, "m4": "four"})  # plain: "i" moves to the end
    for n in range(6):
        span.add_event(f"e{n}", {"k": n, "s": "event string value", "x": 1, "y": 2})
    # the SDK's own cleaning where an event's attributes are not plain scalars
    span.add_event("listed", {"l": [1, 2], "k": 1})
    span.add_event("bad keys", {"": 1, "ok": 2, 3: "three"})  # type: ignore[dict-item]
    span.add_event("bare")
    span.add_link(parent.get_span_context(), {"why": "because"})
    span.update_name("renamed")
    span.set_status(StatusCode.ERROR, "bad")
    span.set_status(Status(StatusCode.UNSET))
    span.record_exception(RuntimeError("boom"), {"extra": 1})
    span.end()
    span.set_attribute("late", 1)
    span.add_event("late")
    span.set_status(StatusCode.OK)
    span.end()
    ok = tracer.start_span("ok", context=ctx)
    ok.set_status(StatusCode.OK)
    ok.set_status(StatusCode.ERROR, "ignored after OK")
    ok.end()
    with pytest.raises(KeyError), tracer.start_as_current_span("raises", context=ctx):
        raise KeyError("k")
    parent.end()


@pytest.mark.parametrize(
    "limits",
    [
        None,
        SpanLimits(max_span_attributes=4, max_events=3, max_event_attributes=2),
        SpanLimits(max_span_attribute_length=5, max_attribute_length=4),
        SpanLimits(max_span_attributes=0),
    ],
    ids=["default limits", "count limits", "length limits", "no attributes"],
)
def test_every_span_call_matches_the_sdk(limits: SpanLimits | None) -> None:
    got = []
    for lean in (True, False):
        provider, exporter = _provider(lean=lean, span_limits=limits)
        _span_by_hand(LeanTracer(provider.get_tracer("by-hand", "1.0")))
        got.append(_shape(exporter.get_finished_spans()))
    assert got[0] == got[1]
    assert [s["name"] for s in got[0]] == ["renamed", "ok", "raises", "parent"]


class AddingSampler(Sampler):
    """Samples every other span by name length and adds an attribute of its own."""

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        from opentelemetry.sdk.trace.sampling import Decision

        decision = Decision.RECORD_AND_SAMPLE if len(name) % 2 else Decision.RECORD_ONLY
        return SamplingResult(
            decision, {**dict(attributes or {}), "sampler": name}, TraceState([("k", "v")])
        )

    def get_description(self) -> str:
        return "AddingSampler"


@pytest.mark.parametrize(
    "sampler",
    [AddingSampler(), ALWAYS_OFF, TraceIdRatioBased(0.5), ParentBased(ALWAYS_OFF)],
    ids=["adds attributes", "always off", "ratio", "parent-based off"],
)
def test_a_sampler_decides_as_for_the_sdk(sampler: Sampler) -> None:
    got = []
    for lean in (True, False):
        provider, exporter = _provider(lean=lean, sampler=sampler)
        tracer = LeanTracer(provider.get_tracer("sampled"))
        kinds = []
        for name in ("a", "bb", "ccc", "dddd") * 8:
            span = tracer.start_span(name, attributes={"n": name})
            kinds.append(type(span) is NonRecordingSpan)
            span.end()
        got.append((kinds, _shape(exporter.get_finished_spans())))
    assert got[0][0] == got[1][0]
    assert got[0][1] == got[1][1]


def test_the_default_sampler_follows_the_parent_as_the_sdk_does() -> None:
    """Remote and local parents, sampled and not: the decision the SDK's default makes."""
    got = []
    for lean in (True, False):
        provider, exporter = _provider(lean=lean)
        tracer = LeanTracer(provider.get_tracer("parents"))
        decisions = []
        for remote in (True, False):
            for sampled in (True, False):
                flags = trace.TraceFlags(trace.TraceFlags.SAMPLED if sampled else 0)
                parent = trace.SpanContext(
                    0xABC,
                    0xDEF,
                    is_remote=remote,
                    trace_flags=flags,
                    trace_state=TraceState([("vendor", "x")]),
                )
                ctx = trace.set_span_in_context(NonRecordingSpan(parent))
                span = tracer.start_span("child", context=ctx)
                decisions.append((span.is_recording(), span.get_span_context().trace_flags))
                span.end()
        got.append((decisions, _shape(exporter.get_finished_spans())))
    assert got[0] == got[1]
    assert [d[0] for d in got[0][0]] == [True, False, True, False]


def _live_type(provider: TracerProvider, **kwargs: Any) -> type:
    span = LeanTracer(provider.get_tracer("which")).start_span("s", **kwargs)
    span.end()
    return type(span)


def test_a_lean_span_is_used_only_where_the_sdk_would_do_no_more() -> None:
    provider, _ = _provider(lean=True)
    assert _live_type(provider) is LeanSpan
    # start links: the SDK's
    link = Link(trace.SpanContext(1, 2, is_remote=False))
    assert _live_type(provider, links=[link]) is not LeanSpan
    # a batch processor, or a subclass keeping its hooks, still lean
    provider.add_span_processor(BatchSpanProcessor(InMemorySpanExporter()))
    assert _live_type(provider) is LeanSpan
    # a processor that reads the span at start, added later: the SDK's from the next span
    watcher = StartWatcher()
    provider.add_span_processor(watcher)
    assert _live_type(provider) is not LeanSpan
    assert watcher.started == ["s"]
    provider.shutdown()


def test_a_tracer_made_before_a_global_provider_uses_it_once_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    proxy = trace.ProxyTracer("late")
    tracer = LeanTracer(proxy)
    assert type(tracer.start_span("before")) is NonRecordingSpan
    provider, exporter = _provider(lean=True)
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", provider)
    span = tracer.start_span("after")
    span.end()
    assert type(span) is LeanSpan
    assert [s.name for s in exporter.get_finished_spans()] == ["after"]


def test_a_disabled_tracer_makes_no_span() -> None:
    from opentelemetry.sdk.trace import _TracerConfig

    provider, exporter = _provider(lean=True)
    sdk_tracer = provider.get_tracer("off")
    sdk_tracer._set_tracer_config(_TracerConfig(is_enabled=False))
    span = LeanTracer(sdk_tracer).start_span("s")
    span.end()
    assert not span.is_recording() and exporter.get_finished_spans() == ()


def _concurrently(fn: Callable[[], None], threads: int = 4) -> None:
    import threading

    workers = [threading.Thread(target=fn) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


def test_a_span_ended_from_several_threads_is_exported_once() -> None:
    provider, exporter = _provider(lean=True)
    spans = [LeanTracer(provider.get_tracer("t")).start_span(f"s{n}") for n in range(200)]
    _concurrently(lambda: [s.end() for s in spans])
    assert sorted(s.name for s in exporter.get_finished_spans()) == sorted(
        f"s{n}" for n in range(200)
    )
