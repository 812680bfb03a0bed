"""Hostile responses and requests through the SDK wrappers and the HTTP transport.

Each test names one attack; it fails if the attack succeeds: a ``RecursionError`` (or
any error from outside the budgetmix tree) out of ``create()``, a turn charged with no
mistake, an error that blames the provider for what was never sent, a body read
without bound, or an event stream read in quadratic time.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

import httpx
import pytest
from _provider_fakes import ANTHROPIC_MODEL, CHAT_TOOLS, make_rig
from budgetmix import ConfigError, ResponseFormatError
from budgetmix.adapters.base import ToolCallRequest
from budgetmix.adapters.http import BudgetTransport
from budgetmix.adapters.testing import Reply

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

USER = [{"role": "user", "content": "hi"}]
DEEP = 100_000
NESTED = "[" * DEEP + "]" * DEEP


def kinds(ep: Any) -> list[str]:
    return [str(m.kind) for m in ep.mistakes]


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


def transport(rig: Any, **kw: Any) -> BudgetTransport:
    return BudgetTransport(rig.net, rig.controller, sleep=rig.sleep, **kw)


def chat_request(**extra: Any) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": USER, **extra}


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


# -- nesting ---------------------------------------------------------------------------
def test_tool_arguments_nested_100k_deep_are_invalid_tool_arguments_through_the_wrapper() -> None:
    from budgetmix.adapters import budgeted

    rig = make_rig([Reply.call("add", NESTED)])
    client = budgeted(rig.openai(max_retries=0), rig.controller)
    with rig.controller.episode() as ep:
        reply = client.chat.completions.create(model="gpt-4o", messages=USER, tools=CHAT_TOOLS)
        assert ep.state.used["turns"] == 1
    assert reply.choices[0].message.tool_calls[0].function.name == "add"
    assert kinds(ep) == ["invalid_tool_arguments"]
    assert "nest" in (ep.mistakes[0].detail or "")


def test_tool_arguments_nested_100k_deep_are_invalid_tool_arguments_through_the_transport() -> None:
    rig = make_rig([Reply.call("add", NESTED)])
    with rig.controller.episode() as ep, httpx.Client(transport=transport(rig)) as http:
        sent = {"model": "gpt-4o", "messages": USER, "tools": CHAT_TOOLS}
        response = http.post("http://fake.test/v1/chat/completions", json=sent)
    assert response.status_code == 200
    assert kinds(ep) == ["invalid_tool_arguments"] and ep.state.used["turns"] == 1


def test_a_response_body_nested_100k_deep_is_a_model_format_error_through_the_transport() -> None:
    body = b'{"choices": [{"message": {"content": ' + NESTED.encode() + b"}}]}"
    rig = make_rig([Reply(body=body), Reply.say("ok")])
    with rig.controller.episode() as ep, httpx.Client(transport=transport(rig)) as http:
        first = http.post("http://fake.test/v1/chat/completions", json=chat_request())
        second = http.post("http://fake.test/v1/chat/completions", json=chat_request())
    assert first.content == body and second.status_code == 200  # passed on as it came
    assert kinds(ep) == ["model_format_error"] and ep.state.used["turns"] == 2


@pytest.mark.parametrize("raw", [False, True], ids=["create", "with_raw_response"])
def test_a_response_body_nested_100k_deep_is_a_response_format_error_through_the_wrapper(
    raw: bool,
) -> None:
    from budgetmix.adapters import budgeted

    body = b'{"choices": [{"message": {"content": ' + NESTED.encode() + b"}}]}"
    rig = make_rig([Reply(body=body)])
    client = budgeted(rig.openai(max_retries=0), rig.controller)
    endpoint = client.chat.completions.with_raw_response if raw else client.chat.completions
    with rig.controller.episode() as ep, pytest.raises(ResponseFormatError) as info:
        endpoint.create(model="gpt-4o", messages=USER)
    assert "could not be read" in str(info.value) and "nest" in str(info.value)
    assert kinds(ep) == ["provider_error"] and ep.state.used["turns"] == 0


def test_an_unreadable_body_through_with_raw_response_is_recorded_like_create() -> None:
    from budgetmix.adapters import budgeted

    rig = make_rig([Reply(body=b"<html>gateway</html>")])
    client = budgeted(rig.openai(max_retries=0), rig.controller)
    with rig.controller.episode() as ep, pytest.raises(ResponseFormatError):
        client.chat.completions.with_raw_response.create(model="gpt-4o", messages=USER)
    assert kinds(ep) == ["provider_error"] and ep.state.used["turns"] == 0


def test_a_tool_input_object_nested_100k_deep_is_checked_without_recursion() -> None:
    """Anthropic's ``input`` arrives as an object: the schema check and its error message
    walk it without recursing into all of it (a message quotes it, bounded)."""
    from budgetmix.adapters._tool_checks import tool_call_problem

    deep: Any = []
    for _ in range(DEEP):
        deep = [deep]
    schema = {"type": "object", "properties": {"a": {"enum": [1, 2]}}}
    problem = tool_call_problem("pick", {"a": deep}, {"pick": schema}, truncated=False)
    assert problem is not None
    kind, detail = problem
    assert str(kind) == "invalid_tool_arguments" and detail.startswith("$.a: [[[")
    assert len(detail) < 300


def test_the_loop_tool_rejects_arguments_nested_100k_deep() -> None:
    from budgetmix.adapters.base import ToolCallRequest
    from budgetmix.adapters.tools import Tool, ToolArgumentError

    def add(a: int, b: int) -> int:
        return a + b

    result = Tool.from_function(add).validate(ToolCallRequest(id="c", name="add", arguments=NESTED))
    assert isinstance(result, ToolArgumentError)
    assert str(result.kind) == "invalid_tool_arguments" and "nest" in result.message


def test_chat_model_readers_survive_hostile_sdk_objects() -> None:
    """The built-in loop's readers get the SDKs' unvalidated models: odd shapes are an
    error response or a tool call with unreadable arguments, never a crash."""
    from budgetmix.adapters._wire.anthropic import model_response as anthropic_response
    from budgetmix.adapters._wire.chat import model_response as chat_response

    deep: Any = []
    for _ in range(DEEP):
        deep = [deep]
    for obj in (
        {"choices": 5},
        {"choices": {"0": 1}},
        {"choices": [{"message": {"tool_calls": 5}}]},
    ):
        assert chat_response(obj).finish_reason in {"error", "stop"}
    weird = {"choices": [{"message": {"content": deep, "tool_calls": [{"id": deep}]}}]}
    assert chat_response(weird).tool_calls[0].name == ""
    blocks = {"content": [{"type": "tool_use", "id": "t", "name": "add", "input": deep}]}
    call = anthropic_response(blocks).tool_calls[0]
    with pytest.raises(ValueError):
        json.loads(call.arguments)  # unreadable: the loop records invalid_tool_arguments
    assert anthropic_response({"content": 5, "stop_reason": deep}).finish_reason == "stop"


# -- lone surrogates and other content that cannot be encoded ---------------------------
@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
def test_a_lone_surrogate_in_content_is_refused_before_sending_naming_where(sdk: str) -> None:
    history = [
        *USER,
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "a\ud800"},
    ]
    rig = make_rig([Reply.say("x")])
    with rig.controller.episode() as ep, pytest.raises(ConfigError) as info:
        if sdk == "openai":
            from budgetmix.adapters import budgeted

            client = budgeted(rig.openai(max_retries=0), rig.controller)
            client.chat.completions.create(model="gpt-4o", messages=history)
        else:
            from budgetmix.adapters import budgeted as abudgeted

            aclient = abudgeted(rig.anthropic(max_retries=0), rig.controller)
            aclient.messages.create(model=ANTHROPIC_MODEL, max_tokens=8, messages=history)
    message = str(info.value)
    assert (
        "messages[2].content" in message and "encoded" in message and "nothing was sent" in message
    )
    assert "response" not in message  # the provider is not blamed for what it never saw
    assert isinstance(info.value, ValueError)  # as the SDK's own UnicodeEncodeError is
    assert rig.net.count == 0 and ep.state.used["turns"] == 0 and kinds(ep) == []


def test_a_lone_surrogate_key_or_a_non_finite_number_is_refused_before_sending() -> None:
    from budgetmix.adapters import budgeted

    rig = make_rig([Reply.say("x")])
    client = budgeted(rig.openai(max_retries=0), rig.controller)
    with rig.controller.episode() as ep:
        with pytest.raises(ConfigError, match=r"messages\[0\]"):
            client.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "a", "\udc80": 1}]
            )
        with pytest.raises(ConfigError, match="temperature"):
            client.chat.completions.create(model="gpt-4o", messages=USER, temperature=float("nan"))
        client.chat.completions.create(model="gpt-4o", messages=USER)  # the chain goes on
    assert rig.net.count == 1 and ep.state.used["turns"] == 1 and kinds(ep) == []


def test_an_escaped_lone_surrogate_through_the_transport_is_forwarded_as_sent() -> None:
    """``json.dumps`` escapes a lone surrogate (``"\\ud800"``): valid JSON the client could
    send; the transport budgets and forwards it instead of failing to re-encode it."""
    rig = make_rig([Reply.say("x")])
    body = json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "a\ud800"}]})
    with rig.controller.episode() as ep, httpx.Client(transport=transport(rig)) as http:
        response = http.post("http://fake.test/v1/chat/completions", content=body.encode())
    assert response.status_code == 200 and ep.state.used["turns"] == 1
    assert b"\\ud800" in rig.fake.requests[0].body
    assert rig.fake.requests[0].json["messages"][0]["content"] == "a\ud800"


# -- request shapes the notice cannot be added to --------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"messages": 5}, "messages"),
        ({"messages": "hi"}, "messages"),
        ({"messages": USER, "stream": "yes"}, "stream"),
        ({"messages": USER, "extra_body": 5}, "extra_body"),
    ],
    ids=["messages-int", "messages-str", "stream-str", "extra_body-int"],
)
def test_a_request_of_the_wrong_shape_is_a_clear_error_before_the_charge(
    kwargs: dict[str, Any], named: str
) -> None:
    from budgetmix.adapters import budgeted

    rig = make_rig([Reply.say("x")])
    client = budgeted(rig.openai(max_retries=0), rig.controller)
    with rig.controller.episode() as ep, pytest.raises(ConfigError, match=named):
        client.chat.completions.create(model="gpt-4o", **kwargs)
    assert rig.net.count == 0 and ep.state.used["turns"] == 0 and kinds(ep) == []


def test_an_anthropic_user_turn_whose_content_is_not_text_or_blocks_is_a_clear_error() -> None:
    from budgetmix.adapters import budgeted

    rig = make_rig([Reply.say("x")])
    client = budgeted(rig.anthropic(max_retries=0), rig.controller)
    with rig.controller.episode() as ep, pytest.raises(ConfigError, match=r"messages\[0\]"):
        client.messages.create(
            model=ANTHROPIC_MODEL, max_tokens=8, messages=[{"role": "user", "content": 5}]
        )
    assert rig.net.count == 0 and ep.state.used["turns"] == 0


def test_the_transport_refuses_a_request_nested_too_deep_to_read_and_sends_nothing() -> None:
    """Passing it on unread would let any request skip the budget."""
    rig = make_rig([Reply.say("x")])
    body = b'{"model": "gpt-4o", "messages": [], "metadata": ' + NESTED.encode() + b"}"
    url = "http://fake.test/v1/chat/completions"
    with (
        rig.controller.episode() as ep,
        httpx.Client(transport=transport(rig)) as http,
        pytest.raises(ConfigError, match="request body"),
    ):
        http.post(url, content=body)
    assert rig.net.count == 0 and ep.state.used["turns"] == 0


def test_the_transport_refuses_a_malformed_history_through_the_sdk_unretried() -> None:
    rig = make_rig([Reply.say("x")])
    client = anthropic.Anthropic(
        api_key="t",
        base_url="http://fake.test",
        http_client=__import__("httpx2").Client(transport=transport(rig)),
        max_retries=3,
    )
    with rig.controller.episode() as ep, pytest.raises(ConfigError, match="messages"):
        client.messages.create(model=ANTHROPIC_MODEL, max_tokens=8, messages=5)  # type: ignore[arg-type]
    assert rig.net.count == 0 and ep.state.used["turns"] == 0


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


def test_a_tool_result_the_model_cannot_be_sent_is_made_sendable() -> None:
    """What a tool returns or raises goes back to the model as text: a value nested too
    deep to print, a ``__str__`` that raises, or a lone surrogate (bytes decoded with
    ``surrogateescape``) would crash the loop or poison every later request."""
    from budgetmix.adapters.tools import render_tool_error, render_tool_result

    deep: Any = []
    for _ in range(DEEP):
        deep = [deep]

    class Hostile(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no text")

    texts = [
        render_tool_result(deep),
        render_tool_result(Hostile()),
        render_tool_result(b"caf\xe9".decode("utf-8", "surrogateescape")),
        render_tool_error(Hostile()),
        render_tool_error(ValueError("bad \udcff byte")),
    ]
    for text in texts:
        text.encode("utf-8")  # raises on a lone surrogate
        assert 0 < len(text) <= 2000
    assert texts[2] == "caf\ufffd" and texts[3].startswith("Error: Hostile")


def test_the_loop_refuses_a_task_that_cannot_be_encoded_before_any_turn() -> None:
    from budgetmix import Budget
    from budgetmix.adapters.loop import run_agent
    from budgetmix.adapters.openai import OpenAIChatModel

    rig = make_rig([Reply.say("x")])
    model = OpenAIChatModel(rig.openai(), "gpt-4o")
    with pytest.raises(ConfigError, match="task"):
        run_agent(model, [], "a\ud800", Budget(turns=3))
    with pytest.raises(ConfigError, match="system"):
        run_agent(model, [], "hi", Budget(turns=3), system="\udcff")
    assert rig.net.count == 0


def test_a_lone_surrogate_the_model_sends_does_not_poison_the_loop_history() -> None:
    """JSON may escape a lone surrogate (``"\\ud800"``); decoded, it is a string no SDK
    can send back. The loop keeps it as U+FFFD, so the next turn still goes out."""
    from budgetmix import Budget
    from budgetmix.adapters.loop import run_agent
    from budgetmix.adapters.openai import OpenAIChatModel

    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    args = '{"a": 1, "b": 2, "note": "\\ud800"}'
    call = ToolCallRequest(name="add", arguments=args, id="c\ud800")
    rig = make_rig([Reply(text="let me add \ud800", tool_calls=(call,)), Reply.say("3")])
    run = run_agent(OpenAIChatModel(rig.openai(), "gpt-4o"), [add], "1+2?", Budget(turns=3))
    assert run.output == "3" and rig.net.count == 2
    sent = rig.fake.requests[1].json["messages"]
    assert sent[1]["content"] == "let me add \ufffd" and sent[2]["tool_call_id"] == "c\ufffd"
