"""Every request path of a ``budgeted(client)`` is budgeted or refused, never silently
unbudgeted: the SDK's low-level ``post`` (LiteLLM's call, exactly), ``with_options``,
``beta.*``, a resource kept from before the episode, non-model endpoints passing through,
the legacy completions endpoint and WebSocket sessions refused inside an episode, and the
SDK's own retries never charging extra turns. Real SDK clients over the in-process fake
LLM."""

from __future__ import annotations

import json
from typing import Any

import pytest
from _provider_fakes import ANTHROPIC_MODEL, make_rig
from budgetmix import BudgetExhausted, ConfigError, ProviderError
from budgetmix.adapters import budgeted
from budgetmix.adapters.testing import Reply
from budgetmix.retry import RetryPolicy

openai = pytest.importorskip("openai")

USER = [{"role": "user", "content": "hi"}]
NOTICE = "Budget (v1): turn {n} of 3"


def litellm_post(client: Any, body: dict[str, Any], *, stream: bool = False) -> Any:
    """What LiteLLM 1.110 sends through a client it is given (``make_sync_openai_chat_
    completion_request``): the SDK's low-level ``post``, its own raw-response header."""
    from openai import Stream
    from openai._base_client import make_request_options
    from openai._legacy_response import RAW_RESPONSE_HEADER
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

    options = make_request_options(extra_headers={RAW_RESPONSE_HEADER: "true"}, timeout=30.0)
    return client.post(
        "/chat/completions",
        body=body,
        cast_to=ChatCompletion,
        options=options,
        stream=stream,
        stream_cls=Stream[ChatCompletionChunk],
    )


def notices(rig: Any) -> list[str]:
    return [str(r.json["messages"][-1]["content"]) for r in rig.fake.model_requests()]


def test_litellm_post_under_a_three_turn_budget_sends_three() -> None:
    rig = make_rig([Reply.say(f"r{i}", input_tokens=4) for i in range(50)], turns=3)
    client = budgeted(rig.openai(), rig.controller)
    answers, refusals = [], 0
    with rig.controller.episode() as ep:
        for _ in range(50):
            try:
                raw = litellm_post(client, {"model": "gpt-4o", "messages": USER})
            except BudgetExhausted:
                refusals += 1
                continue
            answers.append(raw.parse().choices[0].message.content)
        used = dict(ep.state.used)
    assert rig.net.count == 3 and answers == ["r0", "r1", "r2"] and refusals == 47
    assert [n.split(",")[0] for n in notices(rig)] == [NOTICE.format(n=i) for i in (1, 2, 3)]
    assert used["turns"] == 3 and used["input_tokens"] == 12
    assert len(rig.spans("chat")) == 3
    assert ep.result is not None and ep.result.stop_reason == "turns"


def test_litellm_post_streamed_records_usage_as_it_is_read() -> None:
    rig = make_rig([Reply.say("streamed", input_tokens=9, output_tokens=3)], turns=3)
    client = budgeted(rig.openai(), rig.controller)
    with rig.controller.episode() as ep:
        body = {"model": "gpt-4o", "messages": USER, "stream": True}
        chunks = list(litellm_post(client, body, stream=True).parse())
        used = dict(ep.state.used)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "streamed"
    assert used["turns"] == 1 and used["input_tokens"] == 9 and used["output_tokens"] == 3
    assert notices(rig)[0].startswith(NOTICE.format(n=1))


async def test_async_post_and_request_are_budgeted() -> None:
    from openai._base_client import FinalRequestOptions
    from openai.types.chat import ChatCompletion

    rig = make_rig([Reply.say("a"), Reply.say("b"), Reply.say("c")], turns=2)
    client = budgeted(rig.openai(is_async=True), rig.controller)
    async with rig.controller.episode() as ep:
        first = await client.post(
            "/chat/completions", body={"model": "gpt-4o", "messages": USER}, cast_to=ChatCompletion
        )
        options = FinalRequestOptions.construct(
            method="post", url="/chat/completions", json_data={"model": "m", "messages": USER}
        )
        second = await client.request(ChatCompletion, options)
        with pytest.raises(BudgetExhausted):
            await client.post(
                "/chat/completions", body={"model": "m", "messages": USER}, cast_to=ChatCompletion
            )
        assert ep.state.used["turns"] == 2
    assert [first.choices[0].message.content, second.choices[0].message.content] == ["a", "b"]
    assert rig.net.count == 2 and all("Budget (v1)" in n for n in notices(rig))


def test_outside_an_episode_and_non_model_paths_pass_through() -> None:
    rig = make_rig([Reply.say("x")], turns=1)
    client = budgeted(rig.openai(), rig.controller)
    litellm_post(client, {"model": "gpt-4o", "messages": USER})  # no episode: the SDK's own
    assert rig.fake.requests[0].json["messages"] == USER
    with rig.controller.episode() as ep:
        with pytest.raises(openai.NotFoundError):
            client.models.list()  # not a model call: sent as it came, nothing charged
        assert ep.state.used["turns"] == 0
    assert [r.path for r in rig.fake.requests][-1].endswith("/models")
    assert rig.net.count == 2


def test_a_resource_kept_from_before_the_episode_and_with_options_are_budgeted() -> None:
    rig = make_rig([Reply.say("a"), Reply.say("b"), Reply.say("c")], turns=3)
    client = budgeted(rig.openai(), rig.controller)
    kept = client.beta.chat.completions  # fetched outside any episode
    copied = client.with_options(timeout=5.0)
    assert type(copied) is type(client) and type(client.copy()) is type(client)
    with rig.controller.episode() as ep:
        kept.create(model="gpt-4o", messages=USER)
        copied.chat.completions.create(model="gpt-4o", messages=USER)
        copied.with_options(max_retries=4).post(
            "/chat/completions",
            body={"model": "gpt-4o", "messages": USER},
            cast_to=openai.types.chat.ChatCompletion,
        )
        assert ep.state.used["turns"] == 3
    assert [n.split(",")[0] for n in notices(rig)] == [NOTICE.format(n=i) for i in (1, 2, 3)]


def test_legacy_completions_and_websocket_sessions_are_refused_inside_an_episode() -> None:
    rig = make_rig(turns=3)
    client = budgeted(rig.openai(), rig.controller)
    with rig.controller.episode() as ep:
        with pytest.raises(ConfigError, match=r"POST /v1/completions .*chat.completions.create"):
            client.completions.create(model="gpt-3.5-turbo-instruct", prompt="hi")
        with pytest.raises(ConfigError, match=r"POST /v1/responses/compact \(a Responses compa"):
            client.responses.compact(model="gpt-4o", input="hi")
        with pytest.raises(ConfigError, match=r"responses.connect\(\)"):
            client.responses.connect()
        with pytest.raises(ConfigError, match=r"realtime.connect\(\)"):
            client.realtime.connect(model="gpt-realtime")
        with pytest.raises(ConfigError, match=r"beta.realtime.connect\(\)"):
            client.beta.realtime.connect(model="gpt-realtime")
        assert ep.state.used["turns"] == 0
    assert rig.net.count == 0
    manager = client.responses.connect()  # outside an episode: the SDK's own (not entered)
    assert type(manager).__name__ == "ResponsesConnectionManager"


def test_a_final_error_status_is_not_retried_again_by_the_sdk() -> None:
    # the client keeps max_retries=2 for what passes through: 3 x 3 requests without the
    # x-should-retry header the gate sets, each SDK retry a new turn
    rig = make_rig([Reply.error(503)] * 9, turns=5, retry=RetryPolicy(max_attempts=3, jitter=0.0))
    client = budgeted(rig.openai(max_retries=2), rig.controller, sleep=rig.sleep)
    with rig.controller.episode() as ep:
        with pytest.raises(openai.InternalServerError):
            litellm_post(client, {"model": "gpt-4o", "messages": USER})
        assert ep.state.used["turns"] == 0  # a failed turn is given back (the default)
    assert rig.net.count == 3 and len(rig.sleeps) == 2
    assert [str(m.kind) for m in ep.mistakes] == ["provider_error"]


def test_a_final_connection_failure_is_a_provider_error_not_an_sdk_retry() -> None:
    rig = make_rig([Reply(disconnect=True)] * 9, turns=5)
    client = budgeted(rig.openai(max_retries=2), rig.controller, sleep=rig.sleep)
    with rig.controller.episode() as ep, pytest.raises(ProviderError):
        litellm_post(client, {"model": "gpt-4o", "messages": USER})
    assert rig.net.count == 3 and [str(m.kind) for m in ep.mistakes] == ["provider_error"]


def test_anthropic_post_and_beta_messages_are_budgeted() -> None:
    from anthropic.types import Message

    rig = make_rig([Reply.say("a"), Reply.say("b"), Reply.say("c")], turns=2)
    client = budgeted(rig.anthropic(), rig.controller)
    kw: dict[str, Any] = {"model": ANTHROPIC_MODEL, "max_tokens": 8, "messages": USER}
    with rig.controller.episode() as ep:
        client.post("/v1/messages", body=kw, cast_to=Message)
        client.beta.messages.create(**kw)
        with pytest.raises(BudgetExhausted):
            client.beta.messages.create(**kw)
        assert ep.state.used["turns"] == 2
    assert rig.net.count == 2
    assert all("Budget (v1)" in json.dumps(r.json["messages"]) for r in rig.fake.requests)
    with pytest.raises(ConfigError, match="POST /v1/complete"), rig.controller.episode():
        legacy = {"model": "claude-2", "max_tokens_to_sample": 8, "prompt": "\n\nHuman: hi"}
        client.post("/v1/complete", body=legacy, cast_to=Message)
    assert rig.net.count == 2


def test_sdk_omit_sentinels_are_left_out_as_the_sdk_leaves_them() -> None:
    rig = make_rig([Reply.say("a")], turns=3)
    client = budgeted(rig.openai(), rig.controller)
    with rig.controller.episode() as ep:
        reply = client.chat.completions.create(
            model="gpt-4o", messages=USER, stream=openai.omit, tools=openai.NOT_GIVEN
        )
        assert ep.state.used["turns"] == 1
    assert reply.choices[0].message.content == "a"
    assert "stream" not in rig.fake.requests[0].json and "tools" not in rig.fake.requests[0].json


async def test_agents_sdk_run_streamed_uses_the_budgeted_streaming_response() -> None:
    # the Responses model's run_streamed sends through responses.with_streaming_response
    agents = pytest.importorskip("agents")
    rig = make_rig([Reply.say("one"), Reply.say("two"), Reply.say("three")], turns=2)
    client = budgeted(rig.openai(is_async=True), rig.controller)
    model = agents.OpenAIResponsesModel(model="gpt-4o", openai_client=client)
    agent = agents.Agent(name="a", instructions="Answer.", model=model)
    async with rig.controller.episode() as ep:
        for task in ("first", "second"):
            result = agents.Runner.run_streamed(
                agent, task, run_config=agents.RunConfig(tracing_disabled=True)
            )
            async for _ in result.stream_events():
                pass
        with pytest.raises(BudgetExhausted):
            result = agents.Runner.run_streamed(
                agent, "third", run_config=agents.RunConfig(tracing_disabled=True)
            )
            async for _ in result.stream_events():
                pass
        used = dict(ep.state.used)
    assert rig.net.count == 2 and used["turns"] == 2 and used["output_tokens"] > 0
    assert all(r.json["stream"] is True for r in rig.fake.model_requests())
    assert [r.json["input"][-1]["content"].split(",")[0] for r in rig.fake.model_requests()] == [
        "Budget (v1): turn 1 of 2",
        "Budget (v1): turn 2 of 2",
    ]
    assert len(rig.spans("chat")) == 2


@pytest.mark.usefixtures("no_network")
def test_litellm_completion_with_a_budgeted_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # read before import
    litellm = pytest.importorskip("litellm")
    rig = make_rig([Reply.say(f"r{i}") for i in range(50)], turns=3)
    client = budgeted(rig.openai(), rig.controller)
    answers: list[str] = []
    with pytest.raises(litellm.InternalServerError) as info, rig.controller.episode() as ep:
        for _ in range(50):
            reply = litellm.completion(
                model="openai/gpt-4o", messages=USER, client=client, api_key="test"
            )
            answers.append(reply.choices[0].message.content)
    assert "budget exhausted on turns" in str(info.value)  # LiteLLM's wrapper of the stop
    assert rig.net.count == 3 and answers == ["r0", "r1", "r2"]
    assert [n.split(",")[0] for n in notices(rig)] == [NOTICE.format(n=i) for i in (1, 2, 3)]
    assert ep.result is not None and ep.result.status.value == "budget_exhausted"
    assert ep.result.stop_reason == "turns"


def test_a_copy_made_from_the_wrappers_http_client_is_charged_once() -> None:
    # Pydantic AI's with_max_retries: client.with_options(http_client=client._client, ...)
    rig = make_rig([Reply.say("a"), Reply.say("b")], turns=3)
    client = budgeted(rig.openai(), rig.controller)
    assert type(client._client).__name__ == "Client"  # the HTTP client, as on the SDK's
    copy = client.with_options(http_client=client._client, max_retries=1)
    with rig.controller.episode() as ep:
        copy.chat.completions.create(model="gpt-4o", messages=USER)
        copy.post(
            "/chat/completions",
            body={"model": "gpt-4o", "messages": USER},
            cast_to=openai.types.chat.ChatCompletion,
        )
        assert ep.state.used["turns"] == 2
    assert rig.net.count == 2
    assert [n.split(",")[0] for n in notices(rig)] == [NOTICE.format(n=i) for i in (1, 2)]
    assert all(n.count("Budget (v1)") == 1 for n in notices(rig))


def test_a_client_without_an_httpx_client_cannot_be_guarded() -> None:
    from budgetmix.adapters._gate import guarded_client

    client = make_rig().openai()
    client._client = object()  # what no SDK of this generation builds (its copy refuses it)
    with pytest.raises(ConfigError, match=r"client._client: expected an httpx or httpx2 client"):
        guarded_client(client, None, pricing=None, sleep=None)
