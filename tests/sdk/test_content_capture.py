"""Opt-in content capture: content reaches spans only when enabled, and never a secret."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from budgetmix import Budget, BudgetController
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

SECRET = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"


def _traced(capture: bool) -> tuple[BudgetController, InMemorySpanExporter]:
    """A two-turn controller whose spans land in the returned in-memory exporter."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    controller = BudgetController(
        Budget(turns=2), tracer_provider=provider, capture_content=capture
    )
    return controller, exporter


def _run(capture: bool) -> list[dict[str, object]]:
    controller, exporter = _traced(capture)
    with controller.episode() as ep:
        turn = ep.begin_turn(model="m")
        turn.record_content(
            input_messages=[{"role": "user", "content": f"my key is {SECRET}"}],
            output_messages=[{"role": "assistant", "content": "noted"}],
        )
        (call,) = ep.tool_batch(["lookup"], ["c1"])
        call.record_arguments({"api_key": SECRET, "q": "weather"})
        call.succeed({"answer": "sunny"})
        ep.finish(success=True, output="done")
    return [dict(s.attributes or {}) for s in exporter.get_finished_spans()]


def test_content_is_off_by_default() -> None:
    attrs = _run(capture=False)
    keys = {k for a in attrs for k in a}
    assert not keys & {
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
    }


def test_captured_content_is_present_but_redacted() -> None:
    attrs = _run(capture=True)
    merged = {k: v for a in attrs for k, v in a.items()}
    assert "weather" in str(merged["gen_ai.tool.call.arguments"])
    assert "sunny" in str(merged["gen_ai.tool.call.result"])
    chat = next(a for a in attrs if a.get("gen_ai.operation.name") == "chat")
    assert "noted" in str(chat["gen_ai.output.messages"])
    agent = next(a for a in attrs if a.get("gen_ai.operation.name") == "invoke_agent")
    assert agent["output.value"] == "done"  # the episode's final output
    assert SECRET not in repr(attrs)


def test_set_output_survives_to_the_result() -> None:
    controller = BudgetController(Budget(turns=1))
    with controller.episode() as ep:
        ep.begin_turn()
        ep.set_output("best effort")
    assert ep.result is not None
    assert ep.result.final_output == "best effort"
    assert ep.result.status == "failed"  # ended without finish() and without a refusal


class _Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no str")

    __repr__ = __str__


def _cycle() -> list[object]:
    loop: list[object] = ["loop"]
    loop.append(loop)
    return loop


UNENCODABLE = {
    "non_str_keys": lambda: {("a", 1): "tuple key"},
    "cycle": _cycle,
    "repr_raises": lambda: {"value": _Unprintable()},
    "huge_int": lambda: 10**5000,
}


def _outcome(capture: bool, result: object) -> tuple[str, bool | None, int]:
    controller, exporter = _traced(capture)
    with controller.episode() as ep:
        turn = ep.begin_turn(model="m")
        turn.record_content(input_messages=[result], output_messages=result)
        (call,) = ep.tool_batch(["lookup"], ["c1"])
        call.record_arguments(result)
        call.succeed(result)
        ep.finish(success=True, output="done")
    assert ep.result is not None
    return str(ep.result.status), call.ok, len(exporter.get_finished_spans())


@pytest.mark.parametrize("make", UNENCODABLE.values(), ids=UNENCODABLE.keys())
def test_capturing_content_never_changes_the_outcome(make: Callable[[], object]) -> None:
    off = _outcome(False, make())
    on = _outcome(True, make())
    assert on == off == ("success", True, 3)


def test_unencodable_content_is_captured_as_placeholders() -> None:
    controller, exporter = _traced(True)
    with controller.episode() as ep:
        ep.begin_turn()
        (call,) = ep.tool_batch(["lookup"], ["c1"])
        call.succeed({"loop": _cycle(), "odd": _Unprintable(), (1, 2): "k"})
        ep.finish(success=True)
    (tool,) = [s for s in exporter.get_finished_spans() if s.name == "execute_tool lookup"]
    result = json.loads(str((tool.attributes or {})["gen_ai.tool.call.result"]))
    assert result == {
        "loop": ["loop", "[cycle]"],
        "odd": "[unrepresentable _Unprintable]",
        "(1, 2)": "k",
    }
