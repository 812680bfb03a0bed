"""A turn's span gets every attribute known before its request at span start.

The SDK validates start attributes in one pass; each later ``set_attribute`` takes the
span's lock and validates again (issue 33: tracing's per-turn cost). A sampler sees
only the start attributes, so one recording them tells which went in at start.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from budgetmix import Budget, BudgetController
from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind
from opentelemetry.trace.span import TraceState
from opentelemetry.util.types import Attributes


class RecordingSampler(Sampler):
    """Samples everything; keeps each span's name and the attributes it started with."""

    def __init__(self) -> None:
        self.started: list[tuple[str, dict[str, Any]]] = []

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
        self.started.append((name, dict(attributes or {})))
        return ALWAYS_ON.should_sample(
            parent_context, trace_id, name, kind, attributes, links, trace_state
        )

    def get_description(self) -> str:
        return "RecordingSampler"


def _traced(
    exhaustion: Literal["end", "grace"],
) -> tuple[RecordingSampler, InMemorySpanExporter, BudgetController]:
    sampler = RecordingSampler()
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    controller = BudgetController(
        Budget(turns=2), name="t", tracer_provider=provider, exhaustion=exhaustion
    )
    return sampler, exporter, controller


def test_turns_remaining_is_a_start_attribute_of_every_chat_span() -> None:
    sampler, exporter, controller = _traced("end")
    with controller.episode() as ep:
        for turn in ep.turns(model="m"):
            turn.usage(input_tokens=3, output_tokens=1)
    started = [attrs for name, attrs in sampler.started if name == "chat m"]
    assert [a["budgetmix.budget.turns.remaining"] for a in started] == [1, 0]
    assert [a["budgetmix.turn"] for a in started] == [1, 2]
    assert all("budgetmix.grace_turn" not in a for a in started)
    # and the exported spans carry them, with the usage set later
    chats = [dict(s.attributes or {}) for s in exporter.get_finished_spans() if s.name == "chat m"]
    assert [a["budgetmix.budget.turns.remaining"] for a in chats] == [1, 0]
    assert all(a["gen_ai.usage.input_tokens"] == 3 for a in chats)


def test_the_grace_turn_is_marked_at_span_start() -> None:
    sampler, exporter, controller = _traced("grace")
    with controller.episode() as ep:
        for _turn in ep.turns(model="m"):
            pass
    started = [attrs for name, attrs in sampler.started if name == "chat m"]
    assert len(started) == 3  # two charged turns, then the grace turn
    assert [a.get("budgetmix.grace_turn") for a in started] == [None, None, True]
    grace = [s for s in exporter.get_finished_spans() if s.name == "chat m"][-1]
    assert dict(grace.attributes or {})["budgetmix.grace_turn"] is True
