"""A budget stop wrapped by a framework (``raise FrameworkError from exc``, an exception
raised while handling it, ``from None``, an exception group) still ends the episode as
budget_exhausted / early_stopped with its stop reason; the framework's exception
propagates; cycles in the chain are walked once; another episode's stop does not count."""

from __future__ import annotations

from typing import Any

import pytest
from budgetmix import Budget, BudgetController, BudgetExhausted, EarlyStopped, EpisodeStatus
from budgetmix.decisions import EpisodeMachine, budget_stop
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode


class AgentGenerationError(Exception):
    """What smolagents raises around a model call's failure."""


class InternalServerError(Exception):
    """What LiteLLM raises around an exception it cannot map."""


def exhaust(ep: Any) -> None:
    """Spend the one turn, then ask for another (raises BudgetExhausted)."""
    ep.begin_turn().end()
    ep.begin_turn()


class StopWhenAsked:
    def check(self, view: Any) -> str | None:
        return "stuck" if view.mistakes else None


def test_raise_from_ends_as_budget_exhausted_and_propagates() -> None:
    c = BudgetController(Budget(turns=1))
    with pytest.raises(AgentGenerationError) as info, c.episode() as ep:
        try:
            exhaust(ep)
        except BudgetExhausted as exc:
            raise AgentGenerationError("Error in generating model output") from exc
    assert isinstance(info.value.__cause__, BudgetExhausted)
    assert ep.result is not None
    assert ep.result.status is EpisodeStatus.BUDGET_EXHAUSTED
    assert ep.result.stop_reason == "turns"
    assert ep.result.error == "AgentGenerationError: Error in generating model output"


@pytest.mark.parametrize("suppress_context", [False, True], ids=["implicit", "from None"])
def test_an_exception_raised_while_handling_the_stop_ends_as_budget_exhausted(
    suppress_context: bool,
) -> None:
    c = BudgetController(Budget(turns=1))
    with pytest.raises(InternalServerError), c.episode() as ep:
        try:
            exhaust(ep)
        except BudgetExhausted:
            if suppress_context:
                raise InternalServerError("OpenAIException - budget exhausted") from None
            raise InternalServerError("OpenAIException - budget exhausted")  # noqa: B904
    assert ep.result is not None
    assert (ep.result.status, ep.result.stop_reason) == (EpisodeStatus.BUDGET_EXHAUSTED, "turns")


def test_two_levels_of_wrapping_and_an_exception_group() -> None:
    c = BudgetController(Budget(turns=1))
    with pytest.raises(ExceptionGroup), c.episode() as ep:
        try:
            try:
                exhaust(ep)
            except BudgetExhausted as exc:
                raise AgentGenerationError("model") from exc
        except AgentGenerationError as outer:
            raise ExceptionGroup("task group", [ValueError("other"), outer]) from None
    assert ep.result is not None and ep.result.status is EpisodeStatus.BUDGET_EXHAUSTED


def test_a_wrapped_early_stop_keeps_its_reason() -> None:
    c = BudgetController(Budget(turns=5), early_stop=StopWhenAsked())
    with pytest.raises(AgentGenerationError), c.episode() as ep:
        ep.record_mistake("tool_error")
        try:
            ep.begin_turn()
        except EarlyStopped as exc:
            raise AgentGenerationError("model") from exc
    assert ep.result is not None
    assert (ep.result.status, ep.result.stop_reason) == (EpisodeStatus.EARLY_STOPPED, "stuck")


async def test_async_with_and_the_raise_mode() -> None:
    c = BudgetController(Budget(turns=1), exhaustion="raise")
    with pytest.raises(AgentGenerationError):
        async with c.episode() as ep:
            try:
                exhaust(ep)
            except BudgetExhausted as exc:
                raise AgentGenerationError("model") from exc
    assert ep.result is not None and ep.result.status is EpisodeStatus.BUDGET_EXHAUSTED


def test_the_direct_stop_keeps_its_semantics() -> None:
    c = BudgetController(Budget(turns=1))
    with c.episode() as ep:  # swallowed in the "end" mode
        exhaust(ep)
    assert ep.result is not None and ep.result.status is EpisodeStatus.BUDGET_EXHAUSTED
    assert ep.result.error is None


def test_another_episodes_stop_and_an_unrelated_error_are_errors() -> None:
    c = BudgetController(Budget(turns=5))
    with (
        pytest.raises(AgentGenerationError),
        c.episode() as parent,
        parent.child(Budget(turns=1), name="sub") as child,
    ):
        try:
            exhaust(child)
        except BudgetExhausted as exc:
            raise AgentGenerationError("sub-agent") from exc
    assert child.result is not None and child.result.status is EpisodeStatus.BUDGET_EXHAUSTED
    assert parent.result is not None and parent.result.status is EpisodeStatus.ERROR
    with pytest.raises(AgentGenerationError), c.episode() as ep:
        raise AgentGenerationError("no budget involved")
    assert ep.result is not None and ep.result.status is EpisodeStatus.ERROR


def test_a_cycle_in_the_chain_is_walked_once() -> None:
    a, b = AgentGenerationError("a"), InternalServerError("b")
    a.__cause__, b.__context__ = b, a
    assert budget_stop(a, "ep") is None
    stop = BudgetExhausted("turns", {"turns": 1}, {"turns": 1}, (), "ep")
    b.__cause__, stop.__context__ = stop, a
    assert budget_stop(a, "ep") is stop
    closing = EpisodeMachine("end").exiting(a, "ep")
    assert closing is not None and closing.status is EpisodeStatus.BUDGET_EXHAUSTED
    assert closing.suppress is False and closing.error == "AgentGenerationError: a"


def test_the_episode_span_is_not_marked_failed() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    c = BudgetController(Budget(turns=1), tracer_provider=provider)
    with pytest.raises(AgentGenerationError), c.episode() as ep:
        try:
            exhaust(ep)
        except BudgetExhausted as exc:
            raise AgentGenerationError("model") from exc
    (span,) = [s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent")]
    assert span.attributes is not None
    assert span.attributes["budgetmix.status"] == "budget_exhausted"
    # issue 20: an episode that did not succeed is an ERROR span a status filter finds;
    # its error.type is the budget's outcome, not the framework's wrapping exception
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes["error.type"] == "budget_exhausted"
