"""Issue 30, item 5: one classification for unreadable stream bodies, on both paths.

A streamed event whose data is bad JSON, bad UTF-8, nested 100k deep or over
``max_event_bytes`` ends as a :class:`ResponseFormatError` with a ``provider_error``
mistake recorded, through the transport (the SDK's own parser never sees the event,
so it cannot raise ``json.JSONDecodeError`` or ``RecursionError``) and through the
wrapper, as the same bodies unstreamed do. Each test fails if a raw parser error
escapes or no mistake is recorded.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from _provider_fakes import chat_request, kinds, make_rig, transport
from budgetmix import ResponseFormatError
from budgetmix.adapters import budgeted
from budgetmix.adapters.testing import Reply

openai = pytest.importorskip("openai")

GOOD = b'data: {"model":"gpt-4o","choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
DEEP = b"data: " + b'{"a":' * 100_000 + b"1" + b"}" * 100_000 + b"\n\n"
BODIES = {
    "bad_json": GOOD + b"data: {not json\n\n",
    "bad_utf8": GOOD + b'data: {"model":"\xff\xfe"}\n\n',
    "deep": GOOD + DEEP,
    "oversized": GOOD + b'data: {"pad":"' + b"x" * 5000 + b'"}\n\n',
}
USER = [{"role": "user", "content": "hi"}]


def sse_reply(body: bytes) -> Reply:
    return Reply(body=body, headers={"content-type": "text/event-stream"})


def _drain(stream: Any) -> None:
    for _ in stream:
        pass


@pytest.mark.parametrize("name", sorted(BODIES))
def test_an_unreadable_event_through_the_transport_is_a_response_format_error(name: str) -> None:
    import httpx

    rig = make_rig([sse_reply(BODIES[name])])
    http = httpx.Client(transport=transport(rig, max_event_bytes=4096))
    client = openai.OpenAI(api_key="t", base_url="http://fake.test/v1", http_client=http)
    with rig.controller.episode() as ep:
        with pytest.raises(ResponseFormatError) as info:
            _drain(client.chat.completions.create(**chat_request(stream=True)))
        assert isinstance(info.value, openai.OpenAIError)  # the SDK raised it as is
        assert not isinstance(info.value.__cause__, RecursionError)
        assert kinds(ep) == ["provider_error"]
        assert ep.state.used["turns"] <= 1


@pytest.mark.parametrize("name", ["bad_json", "bad_utf8", "deep"])
def test_the_same_body_through_the_wrapper_is_a_response_format_error(name: str) -> None:
    rig = make_rig([sse_reply(BODIES[name])])
    client = budgeted(rig.openai(max_retries=0), rig.controller)
    with rig.controller.episode() as ep:
        with pytest.raises(ResponseFormatError):
            _drain(client.chat.completions.create(**chat_request(stream=True)))
        assert kinds(ep) == ["provider_error"]


@pytest.mark.parametrize("name", ["bad_json", "deep"])
def test_the_same_event_unstreamed_is_a_response_format_error_too(name: str) -> None:
    import httpx

    data = BODIES[name].split(b"\n\n")[1][len(b"data: ") :]
    rig = make_rig([Reply(body=data)])
    http = httpx.Client(transport=transport(rig))
    client = openai.OpenAI(api_key="t", base_url="http://fake.test/v1", http_client=http)
    with rig.controller.episode() as ep:
        with pytest.raises(ResponseFormatError):
            client.chat.completions.create(**chat_request())
        assert kinds(ep) == ["provider_error"]


def test_a_readable_stream_still_reads() -> None:
    import httpx

    body = GOOD + b"data: " + json.dumps({"choices": [], "usage": {
        "prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}).encode() + b"\n\n"
    body += b"data: [DONE]\n\n"
    rig = make_rig([sse_reply(body)])
    http = httpx.Client(transport=transport(rig))
    client = openai.OpenAI(api_key="t", base_url="http://fake.test/v1", http_client=http)
    with rig.controller.episode() as ep:
        _drain(client.chat.completions.create(**chat_request(stream=True)))
        assert kinds(ep) == [] and ep.state.used["input_tokens"] == 3
