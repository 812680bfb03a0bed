"""The HTTP transport and the SDK wrappers behave alike (a body cut short is retried, a
body that is not JSON is a ResponseFormatError); ``on_exhausted="respond"`` answers a
streamed request in its stream form; the transport is an httpx and an httpx2 transport.
Real OpenAI and Anthropic clients over the in-process fake LLM."""

from __future__ import annotations

from typing import Any

import httpx
import httpx2
import pytest
from _provider_fakes import ANTHROPIC_MODEL, Rig, make_rig
from budgetmix import EpisodeStatus, ResponseFormatError
from budgetmix.adapters import budgeted
from budgetmix.adapters.http import AsyncBudgetTransport, BudgetTransport
from budgetmix.adapters.testing import Reply

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

USER = [{"role": "user", "content": "hi"}]


def _client(rig: Rig, path: str, sdk: str) -> Any:
    """A client of ``sdk`` that budgets through ``path``: the wrapper or the transport."""
    if path == "wrapper":
        raw = rig.openai(max_retries=0) if sdk == "openai" else rig.anthropic(max_retries=0)
        return budgeted(raw, rig.controller, sleep=rig.sleep)
    t = BudgetTransport(rig.net, rig.controller, sleep=rig.sleep)
    if sdk == "openai":
        http = httpx.Client(transport=t)
        return openai.OpenAI(api_key="t", base_url="http://f.test/v1", http_client=http)
    http2 = httpx2.Client(transport=t)
    return anthropic.Anthropic(
        api_key="t", base_url="http://f.test", http_client=http2, max_retries=0
    )


def _create(client: Any, sdk: str) -> str:
    if sdk == "openai":
        reply = client.chat.completions.create(model="gpt-4o", messages=USER)
        return str(reply.choices[0].message.content)
    msg = client.messages.create(model=ANTHROPIC_MODEL, max_tokens=8, messages=USER)
    return str(msg.content[0].text)


PATHS = pytest.mark.parametrize("path", ["wrapper", "transport"])
SDKS = pytest.mark.parametrize("sdk", ["openai", "anthropic"])


@PATHS
@SDKS
def test_a_body_cut_short_is_retried_on_both_paths_without_a_turn(path: str, sdk: str) -> None:
    rig = make_rig([Reply.say("lost", cut=True), Reply.say("ok")])
    client = _client(rig, path, sdk)
    with rig.controller.episode() as ep:
        assert _create(client, sdk) == "ok"
    assert rig.net.count == 2 and len(rig.sleeps) == 1  # one retry, under the policy
    assert ep.state.used["turns"] == 1 and list(ep.mistakes) == []
    (turn,) = rig.spans("chat")
    assert [e.name for e in turn.events] == ["budgetmix.retry"]


@PATHS
@SDKS
def test_a_body_that_is_not_json_is_a_response_format_error_on_both_paths(
    path: str, sdk: str
) -> None:
    rig = make_rig([Reply(body=b"<html>gateway</html>"), Reply.say("ok")])
    client = _client(rig, path, sdk)
    with rig.controller.episode() as ep:
        with pytest.raises(ResponseFormatError, match="could not be read"):
            _create(client, sdk)
        assert ep.state.used["turns"] == 0  # given back: the failure is the provider's
        assert _create(client, sdk) == "ok"  # the run goes on
    assert rig.net.count == 2 and rig.sleeps == []  # not retried, on either path
    assert [str(m.kind) for m in ep.mistakes] == ["provider_error"]


# -- on_exhausted="respond" answers in the form the request asked for ----------------
def _respond_rig() -> tuple[Rig, BudgetTransport]:
    rig = make_rig(turns=1)
    return rig, BudgetTransport(rig.net, rig.controller, on_exhausted="respond")


def test_respond_mode_streams_its_answer_to_a_streamed_chat_request() -> None:
    rig, t = _respond_rig()
    client = openai.OpenAI(
        api_key="t", base_url="http://f.test/v1", http_client=httpx.Client(transport=t)
    )
    with rig.controller.episode() as ep:
        client.chat.completions.create(model="gpt-4o", messages=USER)
        stream = client.chat.completions.create(model="gpt-4o", messages=USER, stream=True)
        chunks = list(stream)
        with client.chat.completions.stream(model="gpt-4o", messages=USER) as helper:
            final = helper.get_final_completion()
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "budget exhausted" in text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert "budget exhausted" in (final.choices[0].message.content or "")
    assert rig.net.count == 1  # the answers came from the transport
    assert ep.result is not None and ep.result.status is EpisodeStatus.BUDGET_EXHAUSTED


def test_respond_mode_streams_its_answer_to_a_streamed_responses_request() -> None:
    rig, t = _respond_rig()
    client = openai.OpenAI(
        api_key="t", base_url="http://f.test/v1", http_client=httpx.Client(transport=t)
    )
    with rig.controller.episode():
        client.responses.create(model="gpt-4o", input="hi")
        events = list(client.responses.create(model="gpt-4o", input="hi", stream=True))
        with client.responses.stream(model="gpt-4o", input="hi") as helper:
            final = helper.get_final_response()
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert "budget exhausted" in deltas
    assert events[-1].type == "response.completed"
    assert "budget exhausted" in final.output_text
    assert rig.net.count == 1


async def test_respond_mode_streams_its_answer_to_a_streamed_anthropic_request() -> None:
    rig = make_rig(turns=1)
    t = AsyncBudgetTransport(rig.net, rig.controller, on_exhausted="respond")
    client = anthropic.AsyncAnthropic(
        api_key="t", base_url="http://f.test", http_client=httpx2.AsyncClient(transport=t)
    )
    async with rig.controller.episode():
        await client.messages.create(model=ANTHROPIC_MODEL, max_tokens=8, messages=USER)
        async with client.messages.stream(
            model=ANTHROPIC_MODEL, max_tokens=8, messages=USER
        ) as stream:
            text = "".join([piece async for piece in stream.text_stream])
            final = await stream.get_final_message()
    assert "budget exhausted" in text
    assert final.stop_reason == "end_turn" and final.content[0].text == text
    assert rig.net.count == 1


# -- one transport for both client libraries ----------------------------------------
def test_the_transports_are_httpx_and_httpx2_transports() -> None:
    sync, anyio = BudgetTransport(None, None), AsyncBudgetTransport(None, None)
    assert isinstance(sync, httpx.BaseTransport) and isinstance(sync, httpx2.BaseTransport)
    assert isinstance(anyio, httpx.AsyncBaseTransport)
    assert isinstance(anyio, httpx2.AsyncBaseTransport)


def test_one_transport_serves_the_openai_sdk_on_httpx_and_the_anthropic_sdk_on_httpx2() -> None:
    rig = make_rig()
    t = BudgetTransport(rig.net, rig.controller)
    oa = openai.OpenAI(
        api_key="t", base_url="http://f.test/v1", http_client=httpx.Client(transport=t)
    )
    an = anthropic.Anthropic(
        api_key="t", base_url="http://f.test", http_client=httpx2.Client(transport=t)
    )
    with pytest.raises(TypeError, match="httpx2"):  # what the Anthropic SDK 2.x refuses
        anthropic.Anthropic(api_key="t", http_client=httpx.Client(transport=t))
    with rig.controller.episode() as ep:
        assert _create(oa, "openai") == "done"
        assert _create(an, "anthropic") == "done"
    assert ep.state.used["turns"] == 2 and rig.net.count == 2
