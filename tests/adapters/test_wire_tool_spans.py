"""Tool calls seen on the wire get ``execute_tool`` spans and outcomes with no wrapping: a
call in response n, its result in request n+1 (real SDK clients over the in-process fake
LLM, through the HTTP transport and through the wrapper)."""

from __future__ import annotations

from typing import Any

import httpx
import httpx2
import pytest
from _provider_fakes import ANTHROPIC_MODEL, CHAT_TOOLS, Rig, make_rig
from budgetmix import Budget, BudgetController
from budgetmix.adapters import budgeted
from budgetmix.adapters._wire.common import reads_as_error
from budgetmix.adapters.http import BudgetTransport
from budgetmix.adapters.testing import Reply
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import StatusCode

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

USER = [{"role": "user", "content": "add 1 and 2"}]
TIMING = "budgetmix.tool.timing"


def chat_client(rig: Rig, path: str = "transport") -> Any:
    if path == "wrapper":
        return budgeted(rig.openai(max_retries=0), rig.controller)
    t = BudgetTransport(rig.net, rig.controller)
    return openai.OpenAI(
        api_key="t", base_url="http://f.test/v1", http_client=httpx.Client(transport=t)
    )


def chat_loop(client: Any, results: list[str]) -> Any:
    """A framework's loop: call the model, run each tool itself, send the results."""
    history: list[Any] = list(USER)
    for result in [*results, None]:
        reply = client.chat.completions.create(model="gpt-4o", messages=history, tools=CHAT_TOOLS)
        message = reply.choices[0].message
        if result is None:
            return message
        history.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            history.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return None


def tool_spans(rig: Rig) -> list[ReadableSpan]:
    return rig.spans("execute_tool")


@pytest.mark.parametrize("path", ["transport", "wrapper"])
def test_each_tool_call_on_the_wire_gets_a_span_between_its_response_and_the_next_request(
    path: str,
) -> None:
    rig = make_rig([Reply.call("add", {"a": 1, "b": 2}), Reply.say("3")])
    with rig.controller.episode() as ep:
        chat_loop(chat_client(rig, path), ["3"])
    (span,) = tool_spans(rig)
    first, second = sorted(rig.spans("chat"), key=lambda s: s.start_time or 0)
    assert span.name == "execute_tool add"
    attrs = dict(span.attributes or {})
    assert attrs["gen_ai.operation.name"] == "execute_tool" and attrs[TIMING] == "wire"
    (answer,) = [m for m in rig.fake.requests[1].json["messages"] if m["role"] == "tool"]
    assert attrs["gen_ai.tool.call.id"] == answer["tool_call_id"]
    assert span.parent is not None and span.parent.span_id == first.context.span_id
    # from response 1 read to request 2 made: inside the gap between the two turns
    assert first.start_time is not None and second.start_time is not None
    assert span.start_time is not None and span.end_time is not None
    assert first.start_time <= span.start_time <= span.end_time <= second.start_time
    assert span.status.status_code is not StatusCode.ERROR
    assert "gen_ai.tool.call.arguments" not in attrs  # no content unless captured
    assert "gen_ai.tool.call.result" not in attrs
    assert list(ep.mistakes) == [] and ep.steps[-1].ok


def test_a_result_worded_as_an_error_fails_the_span_and_records_a_mistake() -> None:
    rig = make_rig([Reply.call("add", {"a": 1, "b": 2}), Reply.say("sorry")])
    with rig.controller.episode() as ep:
        chat_loop(chat_client(rig), ["Error: add() got an unexpected keyword 'c'"])
    (span,) = tool_spans(rig)
    assert span.status.status_code is StatusCode.ERROR
    assert dict(span.attributes or {})["error.type"] == "tool_error"
    (mistake,) = ep.mistakes
    assert str(mistake.kind) == "tool_error" and mistake.tool == "add"
    assert "unexpected keyword" in mistake.detail


def test_how_frameworks_word_failures_is_read_as_error_and_nothing_else() -> None:
    failures = [
        "Error: boom",
        "An error occurred while running the tool. Please try again. Error: x",
        "Traceback (most recent call last):\n  File ...",
        "1 validation error for add\n...\n\nFix the errors and try again.",
        "Exception: division by zero",
    ]
    successes = ["3", "no error here", "the error rate is 3%", "", "Errors: 0 of 10 failed"]
    assert all(reads_as_error(text) for text in failures)
    assert not any(reads_as_error(text) for text in successes)


def test_an_anthropic_is_error_result_and_an_invalid_call_get_failed_spans() -> None:
    rig = make_rig(
        [
            Reply.call("add", {"a": 1, "b": 2}),
            Reply.call("add", {"a": "one"}),  # invalid arguments: a mistake on arrival
            Reply.say("done"),
        ]
    )
    t = BudgetTransport(rig.net, rig.controller)
    client = anthropic.Anthropic(
        api_key="t", base_url="http://f.test", http_client=httpx2.Client(transport=t)
    )
    tools = [{"name": "add", "input_schema": CHAT_TOOLS[0]["function"]["parameters"]}]
    history: list[Any] = list(USER)
    with rig.controller.episode() as ep:
        for content, is_error in (("boom", True), ("a must be an integer", False), (None, None)):
            msg = client.messages.create(
                model=ANTHROPIC_MODEL, max_tokens=64, messages=history, tools=tools
            )
            if content is None:
                break
            history.append({"role": "assistant", "content": [b.model_dump() for b in msg.content]})
            (use,) = [b for b in msg.content if b.type == "tool_use"]
            block = {"type": "tool_result", "tool_use_id": use.id, "content": content}
            history.append({"role": "user", "content": [{**block, "is_error": is_error}]})
    flagged, invalid = sorted(tool_spans(rig), key=lambda s: s.start_time or 0)
    assert dict(flagged.attributes or {})["error.type"] == "tool_error"
    assert dict(invalid.attributes or {})["error.type"] == "invalid_tool_arguments"
    assert [str(m.kind) for m in ep.mistakes] == ["tool_error", "invalid_tool_arguments"]


def test_a_call_timed_exactly_by_the_episode_gets_no_second_span() -> None:
    rig = make_rig([Reply.call("add", {"a": 1, "b": 2}), Reply.say("3")])
    client = chat_client(rig)
    history: list[Any] = list(USER)
    with rig.controller.episode() as ep:
        reply = client.chat.completions.create(model="gpt-4o", messages=history, tools=CHAT_TOOLS)
        (call,) = reply.choices[0].message.tool_calls
        result = ep.tool_call("add", call.id).run(lambda: "3")
        history.append(reply.choices[0].message.model_dump(exclude_none=True))
        history.append({"role": "tool", "tool_call_id": call.id, "content": result})
        client.chat.completions.create(model="gpt-4o", messages=history, tools=CHAT_TOOLS)
    (span,) = tool_spans(rig)
    assert TIMING not in dict(span.attributes or {})  # the exact one, not the wire's
    assert len(ep.steps) == 1


def test_responses_calls_and_captured_content() -> None:
    rig = make_rig([Reply.call("add", {"a": 1, "b": 2}), Reply.say("3")])
    rig.controller = capturing(rig)
    client = chat_client(rig)
    tools = [{"type": "function", **CHAT_TOOLS[0]["function"]}]
    with rig.controller.episode():
        first = client.responses.create(model="gpt-4o", input="add", tools=tools)
        (call,) = [item for item in first.output if item.type == "function_call"]
        output = {"type": "function_call_output", "call_id": call.call_id, "output": "3"}
        items = [{"role": "user", "content": "add"}, call.model_dump(exclude_none=True), output]
        client.responses.create(model="gpt-4o", input=items, tools=tools)
    (span,) = tool_spans(rig)
    attrs = dict(span.attributes or {})
    assert attrs["gen_ai.tool.call.id"] == call.call_id
    assert attrs["gen_ai.tool.call.arguments"] == '{"a": 1, "b": 2}'
    assert attrs["gen_ai.tool.call.result"] == "3"


def capturing(rig: Rig) -> BudgetController:
    """A controller that captures content, writing spans to ``rig``'s exporter."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(rig.exporter))
    return BudgetController(Budget(turns=5), tracer_provider=provider, capture_content=True)


@pytest.mark.parametrize("observation", ["Observation:\n3", "Error:\nadd() missing 'b'"])
def test_results_sent_back_as_user_text_end_the_calls_of_the_last_response(
    observation: str,
) -> None:
    # smolagents: the calls echoed as assistant text, the results as one user message
    rig = make_rig([Reply.call("add", {"a": 1, "b": 2}), Reply.say("3")])
    client = chat_client(rig)
    history: list[Any] = list(USER)
    with rig.controller.episode() as ep:
        client.chat.completions.create(model="gpt-4o", messages=history, tools=CHAT_TOOLS)
        history.append({"role": "assistant", "content": "Calling tools: add(a=1, b=2)"})
        history.append({"role": "user", "content": [{"type": "text", "text": observation}]})
        client.chat.completions.create(model="gpt-4o", messages=history, tools=CHAT_TOOLS)
    (span,) = tool_spans(rig)
    failed = observation.startswith("Error")
    assert (span.status.status_code is StatusCode.ERROR) is failed
    assert [str(m.kind) for m in ep.mistakes] == (["tool_error"] if failed else [])
