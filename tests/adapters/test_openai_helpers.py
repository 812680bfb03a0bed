"""The OpenAI SDK's helpers through the wrapper: ``stream()``, ``parse()``,
``with_raw_response`` and ``with_streaming_response`` (budgeted at the HTTP layer), for
chat completions and responses, sync and async, against the in-process fake LLM in the
real wire formats."""

from __future__ import annotations

from typing import Any

import pytest
from _provider_fakes import CHAT_TOOLS, kinds, make_rig
from budgetmix import BudgetExhausted
from budgetmix.adapters import budgeted
from budgetmix.adapters.base import ToolCallRequest
from budgetmix.adapters.testing import Reply
from pydantic import BaseModel

pytest.importorskip("openai")

USER = [{"role": "user", "content": "what is 1+2?"}]
NOTICE_1 = "Budget (v1): turn 1 of 5, 5 turns left including this one."


class Answer(BaseModel):
    value: int


def sent(rig: Any, i: int = 0) -> Any:
    body = rig.fake.requests[i].json
    return body.get("messages", body.get("input"))


# -- chat.completions.stream() ---------------------------------------------------------
def test_chat_stream_helper_keeps_the_sdks_events_and_records_usage() -> None:
    rig = make_rig([Reply(text="hello", tool_calls=(ToolCallRequest(name="add", arguments="{}"),))])
    client = budgeted(rig.openai(), rig.controller)
    with rig.controller.episode() as ep:
        manager = client.chat.completions.stream(model="gpt-4o", messages=USER, tools=CHAT_TOOLS)
        assert ep.state.used["turns"] == 0 and rig.net.count == 0  # sent when entered
        with manager as stream:
            assert ep.state.used["turns"] == 1
            events = [e.type for e in stream]
            final = stream.get_final_completion()
        used = dict(ep.state.used)
    assert "content.delta" in events and "tool_calls.function.arguments.done" in events
    assert final.choices[0].message.content == "hello"
    assert used["input_tokens"] > 0 and used["output_tokens"] > 0
    body = rig.fake.requests[0].json
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert sent(rig)[-1] == {"role": "user", "content": NOTICE_1}
    assert kinds(ep) == ["invalid_tool_arguments"]
    assert rig.fake.requests[0].headers["x-stainless-helper-method"] == "chat.completions.stream"


def test_chat_stream_helper_get_final_completion_alone_and_parsed_format() -> None:
    rig = make_rig([Reply.say('{"value": 3}')])
    client = budgeted(rig.openai(), rig.controller)
    with (
        rig.controller.episode() as ep,
        client.chat.completions.stream(
            model="gpt-4o", messages=USER, response_format=Answer
        ) as stream,
    ):
        final = stream.get_final_completion()
    assert final.choices[0].message.parsed == Answer(value=3)
    assert ep.state.used["output_tokens"] > 0
    assert rig.fake.requests[0].json["response_format"]["type"] == "json_schema"


def test_chat_stream_helper_left_early_records_once_and_refusal_sends_nothing() -> None:
    rig = make_rig([Reply.say("a long answer")], turns=1)
    client = budgeted(rig.openai(), rig.controller)
    with rig.controller.episode() as ep:
        with client.chat.completions.stream(model="gpt-4o", messages=USER) as stream:
            next(iter(stream))
        refused = client.chat.completions.stream(model="gpt-4o", messages=USER)
        with pytest.raises(BudgetExhausted), refused:
            pass
        assert ep.state.used["turns"] == 1
    assert rig.net.count == 1
    events = [e.name for e in rig.spans("chat")[0].events]
    assert events.count("budgetmix.usage_missing") == 1


def test_stream_helper_outside_an_episode_is_the_sdks() -> None:
    rig = make_rig([Reply.say("hi")])
    client = budgeted(rig.openai(), rig.controller)
    with client.chat.completions.stream(model="gpt-4o", messages=USER) as stream:
        final = stream.get_final_completion()
    assert final.choices[0].message.content == "hi"
    assert sent(rig) == USER and "stream_options" not in rig.fake.requests[0].json


# -- parse() ---------------------------------------------------------------------------
def test_chat_parse_is_budgeted_and_returns_the_parsed_model() -> None:
    rig = make_rig([Reply.say('{"value": 3}', input_tokens=10, output_tokens=4)])
    client = budgeted(rig.openai(), rig.controller)
    with rig.controller.episode() as ep:
        reply = client.chat.completions.parse(model="gpt-4o", messages=USER, response_format=Answer)
    assert reply.choices[0].message.parsed == Answer(value=3)
    assert ep.state.used["turns"] == 1 and ep.state.used["input_tokens"] == 10
    assert sent(rig)[-1]["content"] == NOTICE_1


def test_responses_parse_and_stream_helper() -> None:
    rig = make_rig([Reply.say('{"value": 3}'), Reply.say("streamed")])
    client = budgeted(rig.openai(), rig.controller)
    with rig.controller.episode() as ep:
        parsed = client.responses.parse(model="gpt-4o", input="1+2?", text_format=Answer)
        with client.responses.stream(model="gpt-4o", input="again") as stream:
            types = [e.type for e in stream]
            final = stream.get_final_response()
    assert parsed.output_parsed == Answer(value=3)
    assert final.output_text == "streamed" and types[-1] == "response.completed"
    assert ep.state.used["turns"] == 2 and ep.state.used["output_tokens"] > 1
    assert sent(rig, 0)[-1]["content"] == NOTICE_1
    assert sent(rig, 1)[-1]["content"].startswith("Budget (v1): turn 2 of 5")


# -- with_raw_response -----------------------------------------------------------------
def test_with_raw_response_keeps_headers_and_records_usage() -> None:
    rig = make_rig([Reply.say("3", input_tokens=7, output_tokens=2), Reply.say("streamed")])
    client = budgeted(rig.openai(), rig.controller)
    with rig.controller.episode() as ep:
        raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=USER)
        assert ep.state.used["input_tokens"] == 7  # recorded before the caller parses
        reply = raw.parse()
        assert raw.headers["content-type"].startswith("application/json")
        raw_stream = client.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=USER, stream=True
        )
        chunks = list(raw_stream.parse())
        assert raw_stream.parse() is raw_stream.parse()
    assert reply.choices[0].message.content == "3"
    assert chunks[-1].usage is not None
    assert ep.state.used["turns"] == 2 and ep.state.used["input_tokens"] > 7
    assert sent(rig, 1)[-1]["content"].startswith("Budget (v1): turn 2 of 5")


def test_with_streaming_response_is_budgeted_at_the_http_layer() -> None:
    rig = make_rig([Reply.say("hi"), Reply.say("whole", input_tokens=5), Reply.say("r")])
    client = budgeted(rig.openai(), rig.controller)
    with client.chat.completions.with_streaming_response.create(
        model="gpt-4o", messages=USER
    ) as response:  # outside an episode: the SDK's own
        assert response.parse().choices[0].message.content == "hi"
    assert sent(rig, 0) == USER
    with rig.controller.episode() as ep:
        with client.chat.completions.with_streaming_response.create(
            model="gpt-4o", messages=USER
        ) as response:
            assert response.parse().choices[0].message.content == "whole"
        with client.responses.with_streaming_response.create(
            model="gpt-4o", input="hi", stream=True
        ) as response:
            lines = list(response.iter_lines())
        used = dict(ep.state.used)
    assert any("response.completed" in line for line in lines)
    assert used["turns"] == 2 and used["input_tokens"] > 5 and used["output_tokens"] > 0
    assert sent(rig, 1)[-1] == {"role": "user", "content": NOTICE_1}
    assert sent(rig, 2)[-1]["content"].startswith("Budget (v1): turn 2 of 5")
    assert rig.net.count == 3 and len(rig.spans("chat")) == 2


# -- async -----------------------------------------------------------------------------
async def test_async_helpers() -> None:
    rig = make_rig(
        [Reply.say("streamed"), Reply.say('{"value": 3}'), Reply.say("raw"), Reply.say("r")]
    )
    client = budgeted(rig.openai(is_async=True), rig.controller)
    async with rig.controller.episode() as ep:
        async with client.chat.completions.stream(model="gpt-4o", messages=USER) as stream:
            final = await stream.get_final_completion()
        parsed = await client.chat.completions.parse(
            model="gpt-4o", messages=USER, response_format=Answer
        )
        raw = await client.chat.completions.with_raw_response.create(model="gpt-4o", messages=USER)
        async with client.responses.stream(model="gpt-4o", input="hi") as rstream:
            response = await rstream.get_final_response()
    assert final.choices[0].message.content == "streamed"
    assert parsed.choices[0].message.parsed == Answer(value=3)
    assert raw.parse().choices[0].message.content == "raw"
    assert response.output_text == "r"
    assert ep.state.used["turns"] == 4
    assert ep.state.used["output_tokens"] >= 4 and ep.state.used["input_tokens"] > 0
    assert all(sent(rig, i)[-1]["content"].startswith("Budget (v1)") for i in range(4))


async def test_async_with_streaming_response_is_budgeted() -> None:
    rig = make_rig([Reply.say("whole", input_tokens=5), Reply.say("s", input_tokens=6)])
    client = budgeted(rig.openai(is_async=True), rig.controller)
    async with rig.controller.episode() as ep:
        async with client.chat.completions.with_streaming_response.create(
            model="gpt-4o", messages=USER
        ) as response:
            reply = await response.parse()
        async with client.chat.completions.with_streaming_response.create(
            model="gpt-4o", messages=USER, stream=True
        ) as response:
            lines = [line async for line in response.iter_lines()]
        used = dict(ep.state.used)
    assert reply.choices[0].message.content == "whole" and "data: [DONE]" in lines
    assert used["turns"] == 2 and used["input_tokens"] == 11
    assert sent(rig, 1)[-1]["content"].startswith("Budget (v1): turn 2 of 5")


async def test_responses_raw_and_async_parse() -> None:
    rig = make_rig([Reply.say("raw", input_tokens=7), Reply.say('{"value": 3}')])
    sync_client = budgeted(rig.openai(), rig.controller)
    client = budgeted(rig.openai(is_async=True), rig.controller)
    async with rig.controller.episode() as ep:
        raw = sync_client.responses.with_raw_response.create(model="gpt-4o", input="hi")
        assert ep.state.used["input_tokens"] == 7  # recorded before the caller parses
        parsed = await client.responses.parse(model="gpt-4o", input="1+2?", text_format=Answer)
    assert raw.parse().output_text == "raw" and raw.headers["content-type"]
    assert parsed.output_parsed == Answer(value=3)
    assert ep.state.used["turns"] == 2
    assert sent(rig, 1)[-1]["content"].startswith("Budget (v1): turn 2 of 5")
