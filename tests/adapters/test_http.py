"""The httpx budget transport under real OpenAI and Anthropic clients (httpx and httpx2),
with the fake LLM answering in-process behind a request-counting transport."""

from __future__ import annotations

from typing import Any

import httpx
import httpx2
import pytest
from _provider_fakes import (
    ANTHROPIC_MODEL,
    ANTHROPIC_TOOLS,
    CHAT_TOOLS,
    CountingTransport,
    Rig,
    make_rig,
)
from budgetmix import BudgetExhausted, EpisodeStatus, ProviderError, ResponseFormatError
from budgetmix.adapters.base import ToolCallRequest
from budgetmix.adapters.http import (
    CONVERSATION_HEADER,
    DEFAULT_CONVERSATION,
    AsyncBudgetTransport,
    BudgetTransport,
    wire_kind,
)
from budgetmix.adapters.testing import Reply

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

USER = [{"role": "user", "content": "hi"}]


def openai_client(transport: Any, *, lib: Any = httpx, **kw: Any) -> Any:
    return openai.OpenAI(
        api_key="t",
        base_url="http://fake.test/v1",
        http_client=lib.Client(transport=transport),
        **kw,
    )


def anthropic_client(transport: Any, **kw: Any) -> Any:
    return anthropic.Anthropic(
        api_key="t",
        base_url="http://fake.test",
        http_client=httpx2.Client(transport=transport),
        **kw,
    )


def transport(rig: Rig, **kw: Any) -> BudgetTransport:
    return BudgetTransport(rig.net, rig.controller, sleep=rig.sleep, **kw)


def test_wire_kind() -> None:
    assert wire_kind("POST", "/v1/chat/completions") == "chat"
    assert wire_kind("POST", "/v1/responses") == "responses"
    assert wire_kind("POST", "/v1/messages") == "anthropic"
    assert wire_kind("GET", "/v1/responses") is None
    assert wire_kind("POST", "/v1/messages/count_tokens") is None
    assert wire_kind("POST", "/v1/threads/t1/messages") is None


@pytest.mark.parametrize("lib", [httpx, httpx2], ids=["httpx", "httpx2"])
def test_openai_chat_through_the_transport(lib: Any) -> None:
    calls = (ToolCallRequest(name="add", arguments='{"a": 1}'),)
    rig = make_rig([Reply(tool_calls=calls, input_tokens=10, output_tokens=5), Reply.say("3")])
    client = openai_client(transport(rig), lib=lib)
    with rig.controller.episode() as ep:
        client.chat.completions.create(model="gpt-4o", messages=USER, tools=CHAT_TOOLS)
        stream = client.chat.completions.create(model="gpt-4o", messages=USER, stream=True)
        assert ep.state.used["turns"] == 2 and ep.state.used["input_tokens"] == 10
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        ep.finish(True, text)
    assert text == "3"
    assert ep.result is not None
    assert ep.result.used["input_tokens"] > 10 and ep.result.used["cost_usd"] > 0
    assert [str(m.kind) for m in ep.result.mistakes] == ["invalid_tool_arguments"]
    first, second = (r.json for r in rig.fake.requests)
    assert first["messages"][-1]["content"].startswith("Budget (v1): turn 1 of 5")
    assert second["stream_options"] == {"include_usage": True}
    assert rig.fake.requests[1].headers["accept-encoding"] == "identity"


def test_anthropic_messages_and_stream_through_the_transport() -> None:
    rig = make_rig([Reply.call("add", {"a": 1, "b": 2}), Reply.say("3"), Reply.say("done")])
    client = anthropic_client(transport(rig))
    failed = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "add", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "boom", "is_error": True}
            ],
        },
    ]
    with rig.controller.episode() as ep:
        client.messages.create(
            model=ANTHROPIC_MODEL, max_tokens=64, messages=failed, tools=ANTHROPIC_TOOLS
        )
        with client.messages.stream(model=ANTHROPIC_MODEL, max_tokens=64, messages=failed) as s:
            final = s.get_final_message()
        client.messages.create(model=ANTHROPIC_MODEL, max_tokens=64, messages=USER)
    assert final.content[0].text == "3"
    assert [str(m.kind) for m in ep.mistakes] == ["tool_error"]  # once, though sent twice
    sent = rig.fake.requests[0].json["messages"][-1]["content"]
    assert sent[0]["type"] == "tool_result" and sent[-1]["text"].startswith("Budget (v1)")
    assert ep.result is not None and ep.result.used["turns"] == 3
    assert ep.result.used["output_tokens"] >= 3


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
def test_refusal_is_not_retried_by_the_sdk_and_never_sent(sdk: str) -> None:
    rig = make_rig(turns=1)
    outer = CountingTransport(transport(rig))  # counts what the SDK tries
    with rig.controller.episode() as ep:
        if sdk == "openai":
            client = openai_client(outer, max_retries=5)
            client.chat.completions.create(model="gpt-4o", messages=USER)
            with pytest.raises(BudgetExhausted) as info:
                client.chat.completions.create(model="gpt-4o", messages=USER)
            assert isinstance(info.value, openai.OpenAIError)
        else:
            client = anthropic_client(outer, max_retries=5)
            client.messages.create(model=ANTHROPIC_MODEL, max_tokens=8, messages=USER)
            with pytest.raises(BudgetExhausted) as info:
                client.messages.create(model=ANTHROPIC_MODEL, max_tokens=8, messages=USER)
            assert isinstance(info.value, anthropic.AnthropicError)
    assert outer.count == 2 and rig.net.count == 1
    assert info.value.dimension == "turns" and info.value.episode_id == ep.id
    assert ep.result is not None and ep.result.status is EpisodeStatus.BUDGET_EXHAUSTED


def test_respond_mode_answers_with_a_terminal_message_in_each_wire() -> None:
    rig = make_rig(turns=1)
    t = transport(rig, on_exhausted="respond")
    oa, an = openai_client(t), anthropic_client(t)
    with rig.controller.episode() as ep:
        oa.chat.completions.create(model="gpt-4o", messages=USER)
        chat = oa.chat.completions.create(model="gpt-4o", messages=USER)
        resp = oa.responses.create(model="gpt-4o", input="hi")
        msg = an.messages.create(model=ANTHROPIC_MODEL, max_tokens=8, messages=USER)
    assert chat.choices[0].finish_reason == "stop"
    assert "budget exhausted" in (chat.choices[0].message.content or "")
    assert "budget exhausted" in resp.output_text
    assert msg.stop_reason == "end_turn" and "budget exhausted" in msg.content[0].text
    assert rig.net.count == 1
    assert ep.result is not None and ep.result.status is EpisodeStatus.BUDGET_EXHAUSTED


def test_transport_retries_transient_failures_without_turns() -> None:
    rig = make_rig([Reply.error(429), Reply(disconnect=True), Reply.say("ok")])
    client = openai_client(transport(rig), max_retries=0)
    with rig.controller.episode() as ep:
        reply = client.chat.completions.create(model="gpt-4o", messages=USER)
    assert reply.choices[0].message.content == "ok"
    assert rig.net.count == 3 and len(rig.sleeps) == 2
    assert ep.state.used["turns"] == 1 and list(ep.mistakes) == []


def test_after_the_retries_the_sdk_sees_the_provider_error_and_does_not_retry() -> None:
    rig = make_rig([Reply.error(503, "overloaded")] * 3 + [Reply(disconnect=True)] * 3)
    client = openai_client(transport(rig), max_retries=2)  # the SDK's own retries: kept
    with rig.controller.episode() as ep:
        with pytest.raises(openai.InternalServerError, match="overloaded") as status:
            client.chat.completions.create(model="gpt-4o", messages=USER)
        assert status.value.response.headers["x-should-retry"] == "false"
        with pytest.raises(ProviderError) as info:  # as the wrapper raises it
            client.chat.completions.create(model="gpt-4o", messages=USER)
        assert isinstance(info.value, openai.OpenAIError)  # so the SDK raised it as is
        assert ep.state.used["turns"] == 0  # failed requests are refunded
    assert rig.net.count == 6  # the controller's 3 attempts each, no SDK retry (a turn each)
    assert [str(m.kind) for m in ep.mistakes] == ["provider_error", "provider_error"]


def test_other_requests_and_requests_outside_episodes_pass_through() -> None:
    rig = make_rig()
    t = BudgetTransport(rig.net, None)
    client = openai_client(t)
    client.chat.completions.create(model="gpt-4o", messages=USER)
    with httpx.Client(transport=t) as raw:
        assert raw.get("http://fake.test/v1/models").status_code == 404
    assert rig.fake.requests[0].json["messages"] == USER
    assert t.episodes == {}


def test_requests_outside_episodes_share_the_transports_own_conversation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rig = make_rig(turns=2)
    t = transport(rig)
    client = openai_client(t)
    a = [{"role": "system", "content": "s"}, {"role": "user", "content": "task A"}]
    b = [{"role": "system", "content": "s"}, {"role": "user", "content": "task B"}]
    client.chat.completions.create(model="gpt-4o", messages=a)
    client.chat.completions.create(model="gpt-4o", messages=b)  # no fresh budget for B
    with pytest.raises(BudgetExhausted):
        client.chat.completions.create(model="gpt-4o", messages=a)
    assert rig.net.count == 2
    assert caplog.text.count("outside any episode") == 1  # said once, not per request
    named = client.with_options(default_headers={CONVERSATION_HEADER: "named"})
    named.chat.completions.create(model="gpt-4o", messages=a)
    assert sorted(t.episodes) == [DEFAULT_CONVERSATION, "named"]
    assert CONVERSATION_HEADER not in rig.fake.requests[-1].headers  # not the provider's
    assert all(ep.conversation_id == key for key, ep in t.episodes.items())
    results = t.finish()
    assert sorted(r.used["turns"] for r in results) == [1, 2]
    assert sorted(str(r.status) for r in results) == ["budget_exhausted", "failed"]
    assert t.episodes == {}
    client.chat.completions.create(model="gpt-4o", messages=a)  # after finish(): a new one
    assert t.episodes[DEFAULT_CONVERSATION].state.used["turns"] == 1


def test_responses_chained_by_previous_response_id_share_an_episode() -> None:
    rig = make_rig()
    t = transport(rig)
    client = openai_client(t)
    first = client.responses.create(model="gpt-4o", input="start")
    client.responses.create(model="gpt-4o", input="next", previous_response_id=first.id)
    (ep,) = t.episodes.values()
    assert ep.state.used["turns"] == 2
    t.finish(success=True)
    assert ep.result is not None and ep.result.success


async def test_async_transport_with_streams() -> None:
    rig = make_rig([Reply.error(500), Reply.say("a"), Reply.say("b")])
    t = AsyncBudgetTransport(rig.net, rig.controller, sleep=rig.asleep())
    client = openai.AsyncOpenAI(
        api_key="t", base_url="http://fake.test/v1", http_client=httpx.AsyncClient(transport=t)
    )
    aclient = anthropic.AsyncAnthropic(
        api_key="t", base_url="http://fake.test", http_client=httpx2.AsyncClient(transport=t)
    )
    async with rig.controller.episode() as ep:
        stream = await client.responses.create(model="gpt-4o", input="hi", stream=True)
        kinds = [e.type async for e in stream]
        async with aclient.messages.stream(model=ANTHROPIC_MODEL, max_tokens=8, messages=USER) as s:
            text = await s.get_final_text()
        ep.finish(True)
    assert kinds[-1] == "response.completed" and text == "b"
    assert rig.net.count == 3 and len(rig.sleeps) == 1
    assert ep.result is not None and ep.result.used["turns"] == 2
    assert ep.result.used["output_tokens"] >= 2


def test_compressed_json_responses_are_read_once_and_decoded() -> None:
    import gzip
    import json

    body = {
        "id": "c1",
        "object": "chat.completion",
        "created": 0,
        "model": "gpt-4o",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "zip"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
    }
    packed = gzip.compress(json.dumps(body).encode())
    rig = make_rig([Reply(body=packed, headers={"content-encoding": "gzip"})])
    client = openai_client(transport(rig))
    with rig.controller.episode() as ep:
        reply = client.chat.completions.create(model="gpt-4o", messages=USER)
    assert reply.choices[0].message.content == "zip"
    assert ep.state.used["input_tokens"] == 7 and ep.state.used["output_tokens"] == 3


def test_malformed_bodies_do_not_crash_and_are_recorded() -> None:
    rig = make_rig([Reply(body=b"not json"), Reply(body=b'{"choices": []}')])
    client = openai_client(transport(rig), max_retries=0)
    with rig.controller.episode() as ep:
        # as the wrapper raises it (tests/adapters/test_transport_paths.py): not retried
        with pytest.raises(ResponseFormatError) as info:
            client.chat.completions.create(model="gpt-4o", messages=USER)
        assert isinstance(info.value, openai.OpenAIError)  # the SDK passed it on as is
        empty = client.chat.completions.create(model="gpt-4o", messages=USER)
    assert empty.choices == []
    assert [str(m.kind) for m in ep.mistakes] == ["provider_error", "model_format_error"]
    assert ep.state.used["turns"] == 1  # the unreadable one was given back
    assert rig.net.count == 2


def test_transport_records_recoveries_from_the_tool_results_it_forwards() -> None:
    bad = ToolCallRequest(name="add", arguments='{"a": 1}', id="c1")
    rig = make_rig([Reply(tool_calls=(bad,)), Reply.say("3")])
    client = openai_client(transport(rig))
    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}}
    answered = [
        *USER,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "error: b is missing"},
        {"role": "assistant", "content": None, "tool_calls": [{**call, "id": "c2"}]},
        {"role": "tool", "tool_call_id": "c2", "content": "3"},
    ]
    with rig.controller.episode() as ep:
        client.chat.completions.create(model="gpt-4o", messages=USER, tools=CHAT_TOOLS)
        client.chat.completions.create(model="gpt-4o", messages=answered, tools=CHAT_TOOLS)
    assert [m.call_id for m in ep.mistakes] == ["c1"]
    assert [r.recovered for r in ep.recoveries] == [(ep.mistakes[0].id,)]


def test_a_json_body_in_another_unicode_encoding_is_still_budgeted() -> None:
    """JSON may come as UTF-16 (RFC 8259 allows reading it); such a request is budgeted
    like any other, not passed through unseen."""
    import json

    rig = make_rig([Reply.say("ok")])
    body = json.dumps({"model": "gpt-4o", "messages": USER}).encode("utf-16")
    with rig.controller.episode() as ep, httpx.Client(transport=transport(rig)) as http:
        http.post("http://fake.test/v1/chat/completions", content=body)
    assert ep.state.used["turns"] == 1
    assert rig.fake.requests[-1].json["messages"][-1]["content"].startswith("Budget (v1)")


def test_a_response_whose_model_is_not_a_string_is_priced_by_the_requested_model() -> None:
    import json

    reply = {
        "id": "c",
        "object": "chat.completion",
        "model": ["not", "a", "name"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}],
        "usage": {"prompt_tokens": 1000, "completion_tokens": 10},
    }
    rig = make_rig([Reply(body=json.dumps(reply).encode())])
    with rig.controller.episode() as ep, httpx.Client(transport=transport(rig)) as http:
        sent = {"model": "gpt-4o", "messages": USER}
        http.post("http://fake.test/v1/chat/completions", json=sent)
    assert ep.state.used["input_tokens"] == 1000 and ep.state.used["cost_usd"] > 0
