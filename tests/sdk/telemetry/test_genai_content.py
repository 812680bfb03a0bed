"""Captured content is in the GenAI semantic conventions' parts format on every path (the
built-in loop with a scripted model, the OpenAI chat / Responses and Anthropic wrappers),
checked against the conventions' own JSON schemas; the episode span carries the task and
the final answer; an episode that did not succeed is marked ERROR with ``error.type``.

The schemas in ``genai_schemas/`` are ``docs/gen-ai/gen-ai-{input-messages,
output-messages,system-instructions}.json`` of open-telemetry/semantic-conventions at
953276ff4d0404cdddb515e7418e6a2cf43c2b0b, the last version before the GenAI conventions
moved to open-telemetry/semantic-conventions-genai (whose copies, at b49cb9d, define the
same parts; only the key order differs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from budgetmix import Budget, BudgetController
from budgetmix.adapters import budgeted, run_agent
from budgetmix.adapters.testing import FakeLLMServer, Reply, ScriptedModel
from budgetmix.adapters.testing.scripted import final_answer, tool_call, tool_calls
from budgetmix.genai_content import input_messages, output_messages, system_instructions
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

jsonschema = pytest.importorskip("jsonschema")

SCHEMAS = Path(__file__).parent / "genai_schemas"
PART_DEFS = {
    "text": "TextPart",
    "tool_call": "ToolCallRequestPart",
    "tool_call_response": "ToolCallResponsePart",
    "reasoning": "ReasoningPart",
    "uri": "UriPart",
}
SECRET = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"
ADD = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
}


def _schema(name: str) -> dict[str, Any]:
    return json.loads((SCHEMAS / f"gen-ai-{name}.json").read_text())


def check(kind: str, text: Any) -> list[dict[str, Any]]:
    """``text`` (an attribute) parsed and valid against the ``kind`` schema; every part of
    a known type also valid against its own definition (the schema's generic part would
    otherwise accept a malformed text part)."""
    assert isinstance(text, str), f"{kind}: a JSON string attribute, got {type(text)}"
    value = json.loads(text)
    schema = _schema(kind)
    jsonschema.Draft202012Validator(schema).validate(value)
    parts = value if kind == "system-instructions" else [p for m in value for p in m["parts"]]
    for part in parts:
        name = PART_DEFS.get(part["type"])
        if name is not None:
            sub = {"$defs": schema["$defs"], **schema["$defs"][name]}
            jsonschema.Draft202012Validator(sub).validate(part)
    return list(value)


def traced(capture: bool = True, **budget: Any) -> tuple[BudgetController, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    limits = {"turns": 4, **budget}
    controller = BudgetController(
        Budget(**limits), tracer_provider=provider, capture_content=capture
    )
    return controller, exporter


def chats(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    spans = exporter.get_finished_spans()
    turns = [s for s in spans if (s.attributes or {}).get("gen_ai.operation.name") == "chat"]
    return sorted(turns, key=lambda s: s.start_time or 0)


def agent(exporter: InMemorySpanExporter) -> ReadableSpan:
    (span,) = [s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent")]
    return span


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


# -- the built-in loop ------------------------------------------------------------------
def _loop_run(capture: bool) -> InMemorySpanExporter:
    controller, exporter = traced(capture)
    model = ScriptedModel(
        [tool_calls(tool_call("add", {"a": 2, "b": 3}, id="c1")), final_answer("It is 5.")]
    )
    run = run_agent(model, [add], "What is 2+3?", controller, system="Be brief.")
    assert run.output == "It is 5."
    return exporter


def test_run_agent_turns_carry_conventions_messages() -> None:
    turn1, turn2 = chats(_loop_run(capture=True))
    sent1 = check("input-messages", turn1.attributes["gen_ai.input.messages"])
    assert sent1[0] == {"role": "system", "parts": [{"type": "text", "content": "Be brief."}]}
    assert sent1[1] == {"role": "user", "parts": [{"type": "text", "content": "What is 2+3?"}]}
    assert sent1[-1]["parts"][0]["content"].startswith("Budget")  # the ephemeral notice
    (reply1,) = check("output-messages", turn1.attributes["gen_ai.output.messages"])
    assert reply1["finish_reason"] == "tool_call"
    assert reply1["parts"] == [
        {"type": "tool_call", "id": "c1", "name": "add", "arguments": {"a": 2, "b": 3}}
    ]
    sent2 = check("input-messages", turn2.attributes["gen_ai.input.messages"])
    roles = [m["role"] for m in sent2]
    assert roles[:4] == ["system", "user", "assistant", "tool"]
    assert sent2[3]["parts"] == [{"type": "tool_call_response", "id": "c1", "response": "5"}]
    (reply2,) = check("output-messages", turn2.attributes["gen_ai.output.messages"])
    assert reply2 == {
        "role": "assistant",
        "parts": [{"type": "text", "content": "It is 5."}],
        "finish_reason": "stop",
    }


def test_the_episode_span_carries_task_and_answer() -> None:
    span = agent(_loop_run(capture=True))
    attrs = span.attributes or {}
    assert attrs["input.value"] == "What is 2+3?"  # without the notice of turn 1
    assert attrs["output.value"] == "It is 5."
    assert attrs["input.mime_type"] == attrs["output.mime_type"] == "text/plain"
    (task,) = check("input-messages", attrs["gen_ai.input.messages"])
    assert task["parts"] == [{"type": "text", "content": "What is 2+3?"}]
    (answer,) = check("output-messages", attrs["gen_ai.output.messages"])
    assert answer["parts"] == [{"type": "text", "content": "It is 5."}]
    assert span.status.status_code is StatusCode.UNSET  # a success is not marked


def test_without_capture_no_span_carries_content() -> None:
    exporter = _loop_run(capture=False)
    content = {
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.system_instructions",
        "input.value",
        "output.value",
    }
    for span in exporter.get_finished_spans():
        assert not content & set(span.attributes or {}), span.name
    assert "2+3" not in "".join(s.to_json() for s in exporter.get_finished_spans())


# -- the wrappers (the transport records through the same TurnRequest) ------------------
def _fake() -> FakeLLMServer:
    return FakeLLMServer([Reply.call("add", {"a": 2, "b": 3}), Reply.say("It is 5.")])


def _openai(fake: FakeLLMServer) -> Any:
    openai = pytest.importorskip("openai")
    http = httpx.Client(transport=fake.transport())  # type: ignore[arg-type]
    return openai.OpenAI(api_key="test", base_url="http://fake.test/v1", http_client=http)


def test_openai_chat_wrapper_content() -> None:
    fake, (controller, exporter) = _fake(), traced()
    client = budgeted(_openai(fake), controller)
    tools = [{"type": "function", "function": {"name": "add", "parameters": ADD}}]
    messages: list[Any] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "What is 2+3?"}]},
    ]
    with controller.episode(name="chat") as ep:
        first = client.chat.completions.create(model="gpt-4o", messages=messages, tools=tools)
        call = first.choices[0].message.tool_calls[0]
        messages += [first.choices[0].message.model_dump(exclude_none=True)]
        messages += [{"role": "tool", "tool_call_id": call.id, "content": "5"}]
        client.chat.completions.create(model="gpt-4o", messages=messages, tools=tools)
        ep.finish(success=True)
    turn1, turn2 = chats(exporter)
    (reply1,) = check("output-messages", turn1.attributes["gen_ai.output.messages"])
    assert reply1["finish_reason"] == "tool_call"
    assert reply1["parts"][0] | {"id": None} == {
        "type": "tool_call", "id": None, "name": "add", "arguments": {"a": 2, "b": 3}
    }  # fmt: skip
    sent2 = check("input-messages", turn2.attributes["gen_ai.input.messages"])
    assert sent2[1]["parts"] == [{"type": "text", "content": "What is 2+3?"}]
    assert sent2[2]["parts"][0]["type"] == "tool_call"
    assert sent2[3] == {
        "role": "tool",
        "parts": [{"type": "tool_call_response", "id": call.id, "response": "5"}],
    }
    attrs = agent(exporter).attributes or {}
    assert attrs["input.value"] == "What is 2+3?"
    assert attrs["output.value"] == "It is 5."  # the last reply: finish() named no output


def test_openai_responses_wrapper_content() -> None:
    fake, (controller, exporter) = _fake(), traced()
    client = budgeted(_openai(fake), controller)
    tools = [{"type": "function", "name": "add", "parameters": ADD}]
    with controller.episode(name="responses") as ep:
        first = client.responses.create(
            model="gpt-4o", instructions="Be brief.", input="What is 2+3?", tools=tools
        )
        (item,) = [o for o in first.output if o.type == "function_call"]
        items: list[Any] = [
            {"role": "user", "content": "What is 2+3?"},
            item.model_dump(exclude_none=True),
            {"type": "function_call_output", "call_id": item.call_id, "output": "5"},
        ]
        client.responses.create(model="gpt-4o", instructions="Be brief.", input=items, tools=tools)
        ep.finish(success=True, output="5")
    turn1, turn2 = chats(exporter)
    system = check("system-instructions", turn1.attributes["gen_ai.system_instructions"])
    assert system == [{"type": "text", "content": "Be brief."}]
    (reply1,) = check("output-messages", turn1.attributes["gen_ai.output.messages"])
    assert reply1["finish_reason"] == "tool_call"  # a "completed" response that calls
    sent2 = check("input-messages", turn2.attributes["gen_ai.input.messages"])
    assert [m["role"] for m in sent2[:3]] == ["user", "assistant", "tool"]
    assert sent2[1]["parts"][0]["arguments"] == {"a": 2, "b": 3}
    assert sent2[2]["parts"] == [
        {"type": "tool_call_response", "id": item.call_id, "response": "5"}
    ]
    assert (agent(exporter).attributes or {})["output.value"] == "5"


def test_anthropic_wrapper_content() -> None:
    anthropic = pytest.importorskip("anthropic")
    fake, (controller, exporter) = _fake(), traced()
    http = httpx2.Client(transport=fake.transport())
    client = budgeted(
        anthropic.Anthropic(api_key="test", base_url="http://fake.test", http_client=http),
        controller,
    )
    tools = [{"name": "add", "description": "a+b", "input_schema": ADD}]
    system = [{"type": "text", "text": "Be brief."}]
    messages: list[Any] = [{"role": "user", "content": "What is 2+3?"}]
    with controller.episode(name="anthropic") as ep:
        first = client.messages.create(
            model="claude-sonnet-4-6", max_tokens=64, system=system, messages=messages, tools=tools
        )
        (use,) = [b for b in first.content if b.type == "tool_use"]
        messages += [{"role": "assistant", "content": [b.model_dump() for b in first.content]}]
        result = {"type": "tool_result", "tool_use_id": use.id, "content": "5"}
        messages += [{"role": "user", "content": [result]}]
        client.messages.create(
            model="claude-sonnet-4-6", max_tokens=64, system=system, messages=messages, tools=tools
        )
        ep.finish(success=True)
    turn1, turn2 = chats(exporter)
    assert check("system-instructions", turn1.attributes["gen_ai.system_instructions"]) == [
        {"type": "text", "content": "Be brief."}
    ]
    (reply1,) = check("output-messages", turn1.attributes["gen_ai.output.messages"])
    assert reply1["finish_reason"] == "tool_call"
    sent2 = check("input-messages", turn2.attributes["gen_ai.input.messages"])
    assert sent2[1]["parts"][-1] == {
        "type": "tool_call", "id": use.id, "name": "add", "arguments": {"a": 2, "b": 3}
    }  # fmt: skip
    assert sent2[2]["parts"][0] == {"type": "tool_call_response", "id": use.id, "response": "5"}


def test_streamed_chat_through_the_transport_content() -> None:
    """The transport (any framework's HTTP client) records the same parts, streamed too."""
    openai = pytest.importorskip("openai")
    from budgetmix.adapters import BudgetTransport

    fake, (controller, exporter) = _fake(), traced()
    http = httpx.Client(transport=BudgetTransport(fake.transport(), controller))
    client = openai.OpenAI(api_key="test", base_url="http://fake.test/v1", http_client=http)
    tools = [{"type": "function", "function": {"name": "add", "parameters": ADD}}]
    with controller.episode(name="transport", conversation_id="c-9") as ep:
        stream = client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "2+3?"}], tools=tools,
            stream=True, stream_options={"include_usage": True},
        )  # fmt: skip
        chunks = list(stream)
        ep.finish(success=True)
    assert chunks
    (turn,) = chats(exporter)
    sent = check("input-messages", turn.attributes["gen_ai.input.messages"])
    assert sent[0]["parts"] == [{"type": "text", "content": "2+3?"}]
    assert sent[-1]["parts"][0]["content"].startswith("Budget")  # the notice, as sent
    (reply,) = check("output-messages", turn.attributes["gen_ai.output.messages"])
    assert reply["finish_reason"] == "tool_call"
    assert reply["parts"][-1]["arguments"] == {"a": 2, "b": 3}
    assert turn.attributes["gen_ai.conversation.id"] == "c-9"
    assert (agent(exporter).attributes or {})["input.value"] == "2+3?"


# -- the converter on its own -----------------------------------------------------------
def test_odd_blocks_still_validate_and_secrets_stay_out() -> None:
    odd: list[Any] = [
        {"role": "developer", "content": "rules"},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]},
        {"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "AAAA"}}]},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm"}]},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c9", "function": {
            "name": "f", "arguments": "{not json"}}]},
        {"role": "mystery", "content": "dropped"},
        {"type": "reasoning", "summary": []},
        "a bare string",
    ]  # fmt: skip
    parts = input_messages(odd)
    jsonschema.validate(parts, _schema("input-messages"))
    assert parts[0]["role"] == "system"
    assert parts[1]["parts"] == [{"type": "uri", "modality": "image", "uri": "https://x/y.png"}]
    assert parts[2]["parts"] == [{"type": "input_audio"}]  # a generic part, data not copied
    assert parts[3]["parts"] == [{"type": "reasoning", "content": "hmm"}]
    assert parts[4]["parts"][0]["arguments"] == "{not json"  # kept as sent
    assert "dropped" not in json.dumps(parts)
    out = output_messages([{"role": "assistant", "content": "x"}], "max_tokens")
    assert out[0]["finish_reason"] == "length"
    jsonschema.validate(out, _schema("output-messages"))
    jsonschema.validate(system_instructions("s"), _schema("system-instructions"))


def test_a_secret_in_a_message_is_masked() -> None:
    controller, exporter = traced()
    with controller.episode() as ep:
        turn = ep.begin_turn(model="m")
        turn.record_content(
            input_messages=[{"role": "user", "content": f"my key is {SECRET}"}],
            output_messages=[{"role": "assistant", "content": "noted"}],
        )
        ep.finish(success=True)
    (turn_span,) = chats(exporter)
    (sent,) = check("input-messages", turn_span.attributes["gen_ai.input.messages"])
    assert SECRET not in json.dumps(sent)
    assert "[REDACTED]" in sent["parts"][0]["content"]
    assert SECRET not in str(agent(exporter).attributes)


class _Hostile:
    """A message whose every attribute raises (an SDK object gone wrong)."""

    def __getattr__(self, name: str) -> object:
        raise RuntimeError(f"no {name}")


def test_unreadable_content_is_left_out_and_changes_nothing() -> None:
    controller, exporter = traced()
    with controller.episode() as ep:
        turn = ep.begin_turn(model="m")
        turn.record_content(input_messages=[_Hostile()], output_messages=[_Hostile()])
        turn.record_content(input_messages=[{"role": "user", "content": "fine"}])
        ep.finish(success=True)
    assert ep.result is not None and ep.result.success
    (turn_span,) = chats(exporter)
    (sent,) = check("input-messages", turn_span.attributes["gen_ai.input.messages"])
    assert sent["parts"] == [{"type": "text", "content": "fine"}]
    assert "gen_ai.output.messages" not in (turn_span.attributes or {})


# -- outcomes a status filter finds ------------------------------------------------------
@pytest.mark.parametrize(
    ("turns", "success", "status", "description"),
    [
        (1, False, "budget_exhausted", "budget_exhausted: turns"),
        (3, False, "failed", "failed"),
    ],
)
def test_an_episode_that_did_not_succeed_is_an_error_span(
    turns: int, success: bool, status: str, description: str
) -> None:
    controller, exporter = traced(capture=False, turns=turns)
    with controller.episode() as ep:
        ep.begin_turn()
        if turns == 1:
            assert ep.try_begin_turn() is None  # refused: the budget ends the episode
        else:
            ep.finish(success=success)
    span = agent(exporter)
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == description
    assert (span.attributes or {})["error.type"] == status
    assert (span.attributes or {})["budgetmix.status"] == status
