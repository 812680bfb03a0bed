"""The built-in agent loop over a scripted model: batches, mistakes, retries, notices."""

from __future__ import annotations

import threading

import pytest
from budgetmix import Budget, BudgetController, EpisodeStatus, MistakeKind, ProviderError
from budgetmix.adapters import (
    ChatMessage,
    FailingModel,
    ScriptedModel,
    final_answer,
    invalid_json_call,
    run_agent,
    tool_call,
    tool_calls,
    unknown_tool_call,
)
from budgetmix.adapters.loop import REFUSED_BY_BUDGET
from budgetmix.exceptions import BudgetExhausted, ConfigError
from budgetmix.retry import RetryPolicy

pytestmark = pytest.mark.usefixtures("no_network")


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def test_final_answer_without_tools_is_a_success() -> None:
    model = ScriptedModel([final_answer("42")])
    run = run_agent(model, [add], "What is 6*7?", Budget(turns=3))
    assert run.status is EpisodeStatus.SUCCESS
    assert run.output == "42"
    assert run.turns_used == 1
    assert [m.role for m in run.messages] == ["user", "assistant"]
    assert model.requests[0].tool_names == ("add",)


def test_judge_decides_success() -> None:
    model = ScriptedModel([final_answer("41")])
    run = run_agent(model, [add], "6*7?", Budget(turns=3), judge=lambda text: text == "42")
    assert run.status is EpisodeStatus.FAILED
    assert run.output == "41"


def test_tool_results_reach_the_model_in_call_order() -> None:
    model = ScriptedModel(
        [
            tool_calls(
                tool_call("add", {"a": 1, "b": 2}, id="c1"),
                tool_call("add", {"a": 3, "b": 4}, id="c2"),
            ),
            final_answer("done"),
        ]
    )
    run = run_agent(model, [add], "sum things", Budget(turns=4, tool_calls=5))
    second = model.requests[1].messages
    assert [(m.role, m.tool_call_id, m.content) for m in second[-2:]] == [
        ("tool", "c1", "3"),
        ("tool", "c2", "7"),
    ]
    assert run.result.used["tool_calls"] == 2
    assert run.success


def test_parallel_batch_runs_concurrently() -> None:
    barrier = threading.Barrier(3, timeout=10)

    def wait_for_siblings(n: int) -> int:
        """Only returns when all three calls of the batch run at the same time."""
        barrier.wait()
        return n

    batch = tool_calls(*(tool_call("wait_for_siblings", {"n": i}) for i in range(3)))
    model = ScriptedModel([batch, final_answer("ok")])
    run = run_agent(model, [wait_for_siblings], "go", Budget(turns=3), max_parallel=3)
    assert run.success
    assert [m.content for m in run.messages if m.role == "tool"] == ["0", "1", "2"]


def test_batch_over_the_tool_call_limit_is_refused_whole() -> None:
    executed: list[int] = []

    def record(n: int) -> int:
        """Record a call."""
        executed.append(n)
        return n

    batch = tool_calls(*(tool_call("record", {"n": i}) for i in range(3)))
    model = ScriptedModel([batch, final_answer("never")])
    run = run_agent(model, [record], "go", Budget(turns=5, tool_calls=2))
    assert executed == []
    assert run.status is EpisodeStatus.BUDGET_EXHAUSTED
    assert run.result.stop_reason == "tool_calls"
    assert run.result.used["tool_calls"] == 0
    assert model.calls == 1
    results = [m for m in run.messages if m.role == "tool"]
    assert len(results) == 3
    assert all(m.is_error and m.content == REFUSED_BY_BUDGET for m in results)


def test_tool_exception_is_an_error_result_and_a_mistake_then_recovery() -> None:
    def divide(a: float, b: float) -> float:
        """Divide a by b."""
        return a / b

    model = ScriptedModel(
        [
            tool_calls(tool_call("divide", {"a": 1, "b": 0}, id="bad")),
            tool_calls(tool_call("divide", {"a": 1, "b": 4}, id="good")),
            final_answer("0.25"),
        ]
    )
    run = run_agent(model, [divide], "1/4?", Budget(turns=5))
    error = model.requests[1].messages[-1]
    assert error.role == "tool" and error.is_error and "ZeroDivisionError" in error.content
    assert [m.kind for m in run.result.mistakes] == [MistakeKind.TOOL_ERROR]
    assert run.result.mistakes[0].call_id == "bad"
    assert len(run.result.recoveries) == 1
    assert run.result.recoveries[0].recovered == (run.result.mistakes[0].id,)
    assert run.success and run.output == "0.25"


def test_invalid_json_arguments_are_a_mistake_the_model_sees() -> None:
    model = ScriptedModel(
        [tool_calls(invalid_json_call("add", '{"a": 1, "b":')), final_answer("gave up")]
    )
    run = run_agent(model, [add], "add", Budget(turns=3))
    seen = model.requests[1].messages[-1]
    assert seen.is_error and "not valid JSON" in seen.content
    assert [m.kind for m in run.result.mistakes] == [MistakeKind.INVALID_TOOL_ARGUMENTS]


def test_schema_mismatch_is_invalid_arguments() -> None:
    model = ScriptedModel([tool_calls(tool_call("add", {"a": "one", "b": 2})), final_answer("x")])
    run = run_agent(model, [add], "add", Budget(turns=3))
    assert [m.kind for m in run.result.mistakes] == [MistakeKind.INVALID_TOOL_ARGUMENTS]
    assert "a: Input should be a valid integer" in model.requests[1].messages[-1].content


def test_unknown_tool_is_a_mistake_naming_the_available_tools() -> None:
    model = ScriptedModel([tool_calls(unknown_tool_call("mul", {"a": 1})), final_answer("x")])
    run = run_agent(model, [add], "mul", Budget(turns=3))
    seen = model.requests[1].messages[-1]
    assert seen.is_error and "Unknown tool 'mul'" in seen.content and "add" in seen.content
    assert [m.kind for m in run.result.mistakes] == [MistakeKind.UNKNOWN_TOOL]


def test_transient_errors_are_retried_without_consuming_turns() -> None:
    sleeps: list[float] = []
    inner = ScriptedModel([tool_calls(tool_call("add", {"a": 1, "b": 1})), final_answer("2")])
    model = FailingModel(inner, failures=2)
    run = run_agent(model, [add], "1+1", Budget(turns=2), sleep=sleeps.append)
    assert run.success
    assert model.attempts == 4
    assert len(sleeps) == 2
    assert run.turns_used == 2
    assert run.result.mistakes == ()


def test_provider_error_after_the_last_retry() -> None:
    sleeps: list[float] = []
    model = FailingModel(ScriptedModel([final_answer("x")]), failures=10)
    controller = BudgetController(Budget(turns=3), retry=RetryPolicy(max_attempts=2))
    with pytest.raises(ProviderError):
        run_agent(model, [add], "x", controller, sleep=sleeps.append)
    assert model.attempts == 2


def test_turns_exhausted_without_grace() -> None:
    model = ScriptedModel([tool_calls(tool_call("add", {"a": i, "b": 1})) for i in range(5)])
    run = run_agent(model, [add], "loop forever", Budget(turns=2))
    assert run.status is EpisodeStatus.BUDGET_EXHAUSTED
    assert run.result.stop_reason == "turns"
    assert run.output is None
    assert model.calls == 2
    assert not run.result.grace_turn


def test_exhaustion_raise_carries_the_transcript() -> None:
    model = ScriptedModel([tool_calls(tool_call("add", {"a": i, "b": 1})) for i in range(5)])
    with pytest.raises(BudgetExhausted) as info:
        run_agent(model, [add], "loop", Budget(turns=1), exhaustion="raise")
    assert [m.role for m in info.value.transcript] == ["user", "assistant", "tool"]


def test_notice_is_shown_each_turn_and_never_stored() -> None:
    model = ScriptedModel([tool_calls(tool_call("add", {"a": 1, "b": 1})), final_answer("2")])
    task = [ChatMessage(role="user", content="1+1")]
    run = run_agent(model, [add], task, Budget(turns=3), system="Be brief.")
    assert model.notices == [
        "Budget (v1): turn 1 of 3, 3 turns left including this one.",
        "Budget (v1): turn 2 of 3, 2 turns left including this one.",
    ]
    for request in model.requests:
        assert all("Budget (v1)" not in m.content for m in request.messages)
    assert all("Budget (v1)" not in m.content for m in run.messages)
    assert task == [ChatMessage(role="user", content="1+1")]  # the caller's list is untouched
    assert run.messages[0] == ChatMessage(role="system", content="Be brief.")


def test_usage_is_recorded() -> None:
    from budgetmix.adapters import Usage

    model = ScriptedModel([final_answer("x", usage=Usage(input_tokens=11, output_tokens=3))])
    run = run_agent(model, [add], "x", Budget(turns=2))
    assert run.result.used["input_tokens"] == 11
    assert run.result.used["output_tokens"] == 3


def test_cost_limit_needs_a_known_price() -> None:
    model = ScriptedModel([final_answer("x")], model_name="my-own-model")
    with pytest.raises(ConfigError, match="no price known"):
        run_agent(model, [add], "x", Budget(turns=2, cost_usd=1.0))
    assert model.calls == 0


def test_cost_is_recorded_for_a_priced_model() -> None:
    from budgetmix.adapters import Pricing, Usage

    pricing = Pricing({"my-own-model": (1.0, 2.0)}, defaults=False)
    usage = Usage(input_tokens=1_000_000, output_tokens=500_000)
    model = ScriptedModel([final_answer("x", usage=usage)], model_name="my-own-model")
    run = run_agent(model, [add], "x", Budget(turns=2, cost_usd=5.0), pricing=pricing)
    assert run.result.used["cost_usd"] == pytest.approx(2.0)


def test_exhaustion_is_set_on_the_controller_not_twice() -> None:
    controller = BudgetController(Budget(turns=2))
    with pytest.raises(ConfigError, match="exhaustion"):
        run_agent(ScriptedModel([]), [add], "x", controller, exhaustion="grace")


def test_bad_arguments_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="max_parallel"):
        run_agent(ScriptedModel([]), [add], "x", Budget(turns=1), max_parallel=0)
    with pytest.raises(ConfigError, match="task"):
        run_agent(ScriptedModel([]), [add], [], Budget(turns=1))


def test_on_demand_extension_is_offered_as_a_tool() -> None:
    from budgetmix.policies.extension import ExtendOnDemand

    model = ScriptedModel(
        [
            tool_calls(tool_call("request_more_turns", {"turns": 2})),
            tool_calls(tool_call("add", {"a": 1, "b": 1})),
            tool_calls(tool_call("add", {"a": 2, "b": 2})),
            final_answer("4"),
        ]
    )
    run = run_agent(
        model,
        [add],
        "x",
        Budget(turns=2, tool_calls=5),
        extension=ExtendOnDemand(step=2, max_grants=1),
    )
    assert model.requests[0].tool_names == ("add", "request_more_turns")
    assert model.requests[1].messages[-1].content == "Granted 2 more turns."
    assert run.success and run.turns_used == 4
    assert run.result.limits["turns"] == 4
    assert run.result.used["tool_calls"] == 2  # asking for turns costs no tool call
    assert [e.kind for e in run.result.events].count("extended") == 1


def test_on_demand_request_with_bad_arguments_is_a_mistake() -> None:
    from budgetmix.policies.extension import ExtendOnDemand

    model = ScriptedModel(
        [tool_calls(tool_call("request_more_turns", {"turns": 0})), final_answer("x")]
    )
    run = run_agent(model, [add], "x", Budget(turns=2), extension=ExtendOnDemand())
    assert [m.kind for m in run.result.mistakes] == [MistakeKind.INVALID_TOOL_ARGUMENTS]
    assert run.result.limits["turns"] == 2
