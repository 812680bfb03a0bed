"""Hostile response sizes through the HTTP transport: limits and the event-stream reader.

Each test names one attack; it fails if the attack succeeds: a body read without bound,
an event over its limit accepted, a limit error the SDK retries or wraps, or an event
stream read in quadratic time.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

import httpx
import pytest
from _provider_fakes import ANTHROPIC_MODEL, chat_request, kinds, make_rig, transport
from budgetmix import ConfigError, ResponseFormatError
from budgetmix.adapters.http import BudgetTransport
from budgetmix.adapters.testing import Reply

anthropic = pytest.importorskip("anthropic")

USER = [{"role": "user", "content": "hi"}]


def chat_body(**message: Any) -> bytes:
    return json.dumps(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 0,
            "model": "gpt-4o",
            "choices": [
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", **message}}
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
        }
    ).encode()


def sse(*events: Any) -> bytes:
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)


def chunk(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "gpt-4o", "choices": [{"index": 0, "delta": {"content": text}}], **extra}


def read_stream(transport: Any, body: dict[str, Any] | None = None) -> bytes:
    """POST a streamed chat request through ``transport``; the bytes the client reads."""
    request = body or chat_request(stream=True)
    url = "http://fake.test/v1/chat/completions"
    with httpx.Client(transport=transport) as http, http.stream("POST", url, json=request) as r:
        return b"".join(r.iter_raw())


def sse_reply(stream: bytes) -> Reply:
    return Reply(body=stream, headers={"content-type": "text/event-stream"})


# -- size limits -----------------------------------------------------------------------
def test_an_event_over_max_event_bytes_is_a_response_format_error_naming_the_limit() -> None:
    rig = make_rig([sse_reply(sse(chunk("a" * 5000), chunk("b")))])
    with rig.controller.episode() as ep, pytest.raises(ResponseFormatError) as info:
        read_stream(transport(rig, max_event_bytes=1000))
    assert "max_event_bytes=1000" in str(info.value)
    assert kinds(ep) == ["provider_error"]


def test_a_body_over_max_body_bytes_is_a_response_format_error_naming_the_limit() -> None:
    rig = make_rig([Reply(body=chat_body(content="x" * 5000)), Reply.say("ok")])
    url = "http://fake.test/v1/chat/completions"
    with (
        rig.controller.episode() as ep,
        httpx.Client(transport=transport(rig, max_body_bytes=1000)) as http,
    ):
        with pytest.raises(ResponseFormatError) as info:
            http.post(url, json=chat_request())
        assert http.post(url, json=chat_request()).status_code == 200  # the chain goes on
    assert "max_body_bytes=1000" in str(info.value)
    assert kinds(ep) == ["provider_error"] and ep.state.used["turns"] == 1


def test_a_body_streamed_past_max_body_bytes_is_cut_before_it_is_all_read() -> None:
    sent: list[int] = []

    def endless() -> Iterator[bytes]:
        for _ in range(1000):
            sent.append(1)
            yield b"x" * 100

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=_ChunkedStream(endless()))

    rig = make_rig()
    url = "http://fake.test/v1/chat/completions"
    budget = BudgetTransport(httpx.MockTransport(handler), rig.controller, max_body_bytes=1000)
    with (
        rig.controller.episode() as ep,
        httpx.Client(transport=budget) as http,
        pytest.raises(ResponseFormatError, match="max_body_bytes"),
    ):
        http.post(url, json=chat_request())
    assert len(sent) == 11 and kinds(ep) == ["provider_error"]


def test_a_stream_over_max_body_bytes_is_cut_with_a_response_format_error() -> None:
    rig = make_rig([sse_reply(sse(*(chunk("a" * 100) for _ in range(50))))])
    with rig.controller.episode() as ep, pytest.raises(ResponseFormatError, match="max_body"):
        read_stream(transport(rig, max_body_bytes=1000))
    assert kinds(ep) == ["provider_error"]


def test_the_limits_reach_the_sdk_as_its_own_error_class_and_are_not_retried() -> None:
    rig = make_rig([Reply(body=chat_body(content="x" * 5000))] * 3)
    client = anthropic.Anthropic(
        api_key="t",
        base_url="http://fake.test",
        http_client=__import__("httpx2").Client(transport=transport(rig, max_body_bytes=1000)),
        max_retries=3,
    )
    with rig.controller.episode(), pytest.raises(ResponseFormatError) as info:
        client.messages.create(model=ANTHROPIC_MODEL, max_tokens=8, messages=USER)
    assert isinstance(info.value, anthropic.AnthropicError) and rig.net.count == 1


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "16MB"])
def test_limits_are_validated(bad: Any) -> None:
    with pytest.raises(ConfigError, match="max_event_bytes"):
        BudgetTransport(None, None, max_event_bytes=bad)
    with pytest.raises(ConfigError, match="max_body_bytes"):
        BudgetTransport(None, None, max_body_bytes=bad)


# -- the event-stream reader -----------------------------------------------------------
class CountingBytes(bytes):
    """Bytes that add up how much of themselves each operation touches (scans, copies,
    concatenations); whatever the reader derives from them is counted too."""

    touched = 0

    def _count(self, n: int) -> None:
        CountingBytes.touched += n

    def _wrap(self, value: Any) -> Any:
        return CountingBytes(value) if type(value) is bytes else value

    def __add__(self, other: Any) -> Any:
        out = bytes.__add__(self, other)
        self._count(len(out))
        return CountingBytes(out)

    def __radd__(self, other: Any) -> Any:
        out = bytes(other) + bytes(self)
        self._count(len(out))
        return CountingBytes(out)

    def __contains__(self, item: Any) -> bool:
        self._count(len(self))
        return bytes.__contains__(self, item)

    def __getitem__(self, key: Any) -> Any:
        out = bytes.__getitem__(self, key)
        if isinstance(key, slice):
            self._count(len(out))
            return CountingBytes(out)
        return out


def _scanning(name: str) -> Any:
    method = getattr(bytes, name)

    def scan(self: CountingBytes, *args: Any, **kwargs: Any) -> Any:
        self._count(len(self))
        out = method(self, *args, **kwargs)
        if isinstance(out, list):
            return [self._wrap(x) for x in out]
        if isinstance(out, tuple):
            return tuple(self._wrap(x) for x in out)
        return self._wrap(out)

    return scan


for _name in (
    "split",
    "splitlines",
    "partition",
    "replace",
    "find",
    "index",
    "rfind",
    "strip",
    "lstrip",
    "rstrip",
    "count",
    "endswith",
    "startswith",
):
    setattr(CountingBytes, _name, _scanning(_name))


class _ChunkedStream(httpx.SyncByteStream):
    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = chunks

    def __iter__(self) -> Iterator[bytes]:
        yield from self._chunks


def _serve_chunks(chunks: list[bytes]) -> Any:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, stream=_ChunkedStream(chunks)
        )

    return httpx.MockTransport(handler)


def test_the_event_stream_reader_is_linear_in_the_size_of_one_event() -> None:
    """An event of ~2 MB in 2,000 chunks: every byte is touched a bounded number of
    times (the quadratic reader touched each about a thousand times)."""
    big = sse(chunk("x" * 2_000_000, usage={"prompt_tokens": 7, "completion_tokens": 1}))
    size = 1000
    chunks = [CountingBytes(big[i : i + size]) for i in range(0, len(big), size)]
    rig = make_rig()
    CountingBytes.touched = 0
    with rig.controller.episode() as ep:
        assert read_stream(BudgetTransport(_serve_chunks(chunks), rig.controller)) == big
        assert ep.state.used["input_tokens"] == 7  # the event was read, and read once
    assert CountingBytes.touched <= 8 * len(big), CountingBytes.touched / len(big)


@pytest.mark.parametrize(
    "wire",
    [
        b"data: {A}\r\n\r\ndata: {B}\r\n\r\n",  # CRLF, split anywhere
        b"data: {A}\r\rdata: {B}\r\r",  # bare CR line endings
        b"data: {A}\n\ndata: {B}\n\n",
        b": keep-alive\n\nevent: chunk\ndata:{A}\nid: 1\n\ndata: [DONE]\n\ndata: {B}\n\n",
    ],
    ids=["crlf", "cr", "lf", "fields"],
)
def test_event_lines_end_in_any_of_the_three_line_endings_split_anywhere(wire: bytes) -> None:
    first = json.dumps(chunk("he")).encode()
    last = json.dumps(chunk("y", usage={"prompt_tokens": 4, "completion_tokens": 2})).encode()
    payload = wire.replace(b"{A}", first).replace(b"{B}", last)
    for cut in range(1, len(payload)):
        rig = make_rig()
        chunks = [payload[:cut], payload[cut:]]
        with rig.controller.episode() as ep:
            assert read_stream(BudgetTransport(_serve_chunks(chunks), rig.controller)) == payload
            assert ep.state.used["input_tokens"] == 4 and ep.state.used["output_tokens"] == 2, cut


def test_a_data_field_over_several_lines_is_one_event() -> None:
    event = json.dumps(chunk("hey", usage={"prompt_tokens": 4, "completion_tokens": 2}), indent=1)
    payload = b"".join(b"data: " + line.encode() + b"\n" for line in event.splitlines()) + b"\n"
    rig = make_rig()
    with rig.controller.episode() as ep:
        read_stream(BudgetTransport(_serve_chunks([payload]), rig.controller))
        assert ep.state.used["input_tokens"] == 4


async def test_the_async_transport_enforces_both_limits() -> None:
    from budgetmix.adapters.http import AsyncBudgetTransport

    big_event = sse_reply(sse(chunk("a" * 5000)))
    rig = make_rig([Reply(body=chat_body(content="x" * 30_000)), big_event])
    url = "http://fake.test/v1/chat/completions"
    budget = AsyncBudgetTransport(
        rig.net, rig.controller, max_event_bytes=1000, max_body_bytes=20_000
    )
    with rig.controller.episode() as ep:
        async with httpx.AsyncClient(transport=budget) as http:
            with pytest.raises(ResponseFormatError, match="max_body_bytes=20000"):
                await http.post(url, json=chat_request())
            with pytest.raises(ResponseFormatError, match="max_event_bytes=1000"):
                async with http.stream("POST", url, json=chat_request(stream=True)) as r:
                    async for _ in r.aiter_raw():
                        pass
    assert kinds(ep) == ["provider_error", "provider_error"] and ep.state.used["turns"] == 0
