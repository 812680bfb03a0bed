"""Property-based: the adapters' response readers under hostile values.

Hypothesis drives the readers of the three wire kinds (Chat Completions, Responses,
Anthropic Messages), whole bodies and server-sent event streams, with values of any
type and shape: huge and negative numbers, NaN, lone surrogates, nesting far past
Python's recursion limit, fields of the wrong type, bytes cut at any point. The
invariant, over a chain of turns in one episode:

* a defined outcome: a parsed response, or an error from the budgetmix tree (never
  ``RecursionError``, ``KeyError``, ``TypeError``...);
* the ledger consistent: one turn per request that was answered, tokens exactly the sum
  of the valid counts the responses reported (the last report of a stream wins), cost
  finite and non-negative;
* nothing lost: every answered turn leaves its assistant message in the transcript, the
  client reads the bytes the server sent, and a good turn after the hostile ones counts
  exactly what it reported.

Each test is bounded (``max_examples``, no deadline) to stay well under 30 s on a slow
machine.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import re
from collections import deque
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from _provider_fakes import ANTHROPIC_MODEL, ANTHROPIC_TOOLS, CHAT_TOOLS, RESPONSES_TOOLS, make_rig
from budgetmix import Budget, BudgetController, BudgetmixError, MistakeKind
from budgetmix.adapters._turn import TurnRequest
from budgetmix.adapters._wire import WireKind, accumulator, parse_response
from budgetmix.adapters.base import ToolCallRequest
from budgetmix.adapters.http import BudgetTransport
from budgetmix.adapters.pricing import DEFAULT_PRICING
from budgetmix.adapters.testing import FakeLLMServer, Reply
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

KINDS: tuple[WireKind, ...] = ("chat", "responses", "anthropic")
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "anthropic": "/v1/messages"}
USER = [{"role": "user", "content": "hi"}]
TOOLS = {"chat": CHAT_TOOLS, "responses": RESPONSES_TOOLS, "anthropic": ANTHROPIC_TOOLS}
MISTAKES = {str(k) for k in MistakeKind}

# -- hostile values --------------------------------------------------------------------
#: A value nested this deep is written into the JSON text by :func:`encode` (json.dumps
#: itself would recurse): shallow enough to read anywhere, or far past Python's recursion
#: limit (never near it, where being read or not depends on the caller's stack).
DEPTH = st.integers(min_value=1, max_value=200) | st.integers(min_value=3000, max_value=5000)
DEEP = DEPTH.map(lambda d: f"\x00deep:{d}")
SURROGATE = st.characters(categories=["Cs"])
TEXT = st.text(max_size=6) | st.builds(lambda a, s: a + s, st.text(max_size=3), SURROGATE)
NUMBER = (
    st.integers()
    | st.sampled_from([2**53 - 1, 2**53, -1, 10**30, True, False])
    | st.floats(allow_nan=True, allow_infinity=True)
)
LEAF = st.none() | NUMBER | TEXT | DEEP
VALUE = st.recursive(
    LEAF,
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(TEXT, kids, max_size=3),
    max_leaves=6,
)


def maybe(shape: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly the real shape, sometimes any hostile value in its place."""
    return st.one_of(shape, shape, shape, VALUE)


def obj(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    full = st.fixed_dictionaries(fields)
    return st.one_of(full, full, st.fixed_dictionaries({}, optional=fields), VALUE)


def some(shape: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return maybe(st.lists(shape, min_size=1, max_size=2))


ARGS = st.one_of(
    st.just('{"a": 1, "b": 2}'),
    DEPTH.map(lambda d: '{"a": ' + "[" * d + "]" * d + "}"),
    TEXT,
    VALUE,
)
NAME = st.sampled_from(["add", "nope"]) | VALUE
COUNT = st.integers(min_value=0, max_value=10_000) | NUMBER | VALUE
CHAT_USAGE = obj(prompt_tokens=COUNT, completion_tokens=COUNT, prompt_tokens_details=VALUE)
RESPONSES_USAGE = obj(input_tokens=COUNT, output_tokens=COUNT, input_tokens_details=VALUE)
ANTHROPIC_USAGE = obj(input_tokens=COUNT, output_tokens=COUNT, cache_read_input_tokens=COUNT)
CALL = obj(id=VALUE, function=obj(name=NAME, arguments=ARGS), index=COUNT)
CHAT = obj(
    model=VALUE,
    choices=some(
        obj(
            finish_reason=st.sampled_from(["stop", "length", "tool_calls"]) | VALUE,
            index=COUNT,
            message=obj(content=TEXT | VALUE, tool_calls=some(CALL)),
            delta=obj(content=TEXT | VALUE, tool_calls=some(CALL)),
        )
    ),
    usage=CHAT_USAGE,
)
RESPONSE = obj(
    model=VALUE,
    status=VALUE,
    incomplete_details=obj(reason=st.just("max_output_tokens") | VALUE),
    output=some(
        obj(
            type=st.sampled_from(["message", "function_call"]) | VALUE,
            name=NAME,
            call_id=VALUE,
            arguments=ARGS,
            content=some(obj(type=st.just("output_text") | VALUE, text=TEXT | VALUE)),
        )
    ),
    usage=RESPONSES_USAGE,
)
RESPONSES_EVENT = obj(
    type=st.sampled_from(
        ["response.completed", "response.incomplete", "response.output_text.delta"]
    )
    | VALUE,
    response=RESPONSE,
    delta=TEXT | VALUE,
)
BLOCK = obj(
    type=st.sampled_from(["text", "tool_use"]) | VALUE,
    text=TEXT | VALUE,
    id=VALUE,
    name=NAME,
    input=obj(a=VALUE, b=COUNT),
)
ANTHROPIC = obj(
    model=VALUE,
    stop_reason=st.sampled_from(["end_turn", "max_tokens", "tool_use"]) | VALUE,
    content=some(BLOCK),
    usage=ANTHROPIC_USAGE,
)
ANTHROPIC_EVENT = obj(
    type=st.sampled_from(
        ["message_start", "content_block_start", "content_block_delta", "message_delta"]
    )
    | VALUE,
    message=obj(model=VALUE, usage=ANTHROPIC_USAGE),
    index=COUNT,
    content_block=BLOCK,
    delta=obj(
        type=st.sampled_from(["text_delta", "input_json_delta"]) | VALUE,
        text=TEXT | VALUE,
        partial_json=TEXT | VALUE,
        stop_reason=VALUE,
    ),
    usage=obj(output_tokens=COUNT),
)


# -- real responses, then mutated: every field, one at a time or a few at once ----------
REPLIES = [
    Reply.say("hello there", cached_tokens=2, cache_write_tokens=1),
    Reply(
        text="let me add",
        tool_calls=(
            ToolCallRequest(name="add", arguments='{"a": 1, "b": 2}'),
            ToolCallRequest(name="add", arguments='{"a": 1'),
            ToolCallRequest(name="nope", arguments="{}"),
        ),
    ),
    Reply(text="cut sho", finish_reason="length"),
]


def _rendered(kind: WireKind, reply: Reply, *, stream: bool) -> list[Any]:
    """What the fake server answers: the events of a stream, or ``[body]``."""
    fake = FakeLLMServer([reply])
    request = {"model": "gpt-4o", "messages": USER, "stream": stream}
    if stream:
        request["stream_options"] = {"include_usage": True}
    out = fake.handle("POST", PATHS[kind], {}, json.dumps(request).encode())
    if not stream:
        return [json.loads(b"".join(out.chunks))]
    lines = b"".join(out.chunks).decode().splitlines()
    data = [line[6:] for line in lines if line.startswith("data: ")]
    return [json.loads(d) for d in data if d != "[DONE]"]


def _paths(value: Any) -> list[tuple[Any, ...]]:
    """Every node's path in ``value`` (the root's is ``()``)."""
    out: list[tuple[Any, ...]] = []
    pending: list[tuple[tuple[Any, ...], Any]] = [((), value)]
    while pending:
        path, node = pending.pop()
        out.append(path)
        items = (
            node.items()
            if isinstance(node, dict)
            else enumerate(node)
            if isinstance(node, list)
            else ()
        )
        pending.extend(((*path, k), v) for k, v in items)
    return out


def _mutated(template: Any, changes: list[tuple[int, Any]]) -> Any:
    value = copy.deepcopy(template)
    for which, new in changes:
        paths = _paths(value)
        path = paths[which % len(paths)]
        if not path:
            value = new
            continue
        parent = value
        for key in path[:-1]:
            parent = parent[key]
        parent[path[-1]] = new
    return value


CHANGES = st.lists(
    st.tuples(st.integers(min_value=0, max_value=10**6), VALUE), min_size=1, max_size=3
)


def mutants(kind: WireKind, *, stream: bool) -> st.SearchStrategy[Any]:
    """A real response (or event list) of ``kind`` with a few values replaced by hostile ones."""
    templates = [_rendered(kind, r, stream=stream) for r in REPLIES]
    picked = st.sampled_from(templates if stream else [t[0] for t in templates])
    return st.builds(_mutated, picked, CHANGES)


def as_events(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


WHOLE = {
    k: mutants(k, stream=False) | s
    for k, s in (("chat", CHAT), ("responses", RESPONSE), ("anthropic", ANTHROPIC))
}
STREAM = {
    k: mutants(k, stream=True).map(as_events) | st.lists(s, max_size=4)
    for k, s in (("chat", CHAT), ("responses", RESPONSES_EVENT), ("anthropic", ANTHROPIC_EVENT))
}

_DEEP_MARK = re.compile(r'"\\u0000deep:(\d+)"')


def encode(value: Any) -> bytes:
    """JSON text for ``value`` (NaN and infinities as Python writes them, lone surrogates
    escaped), with each deep marker replaced by arrays nested that deep."""
    text = json.dumps(value)
    return _DEEP_MARK.sub(lambda m: "[" * int(m[1]) + "]" * int(m[1]), text).encode()


def decoded(value: Any) -> Any:
    """``value`` as a JSON reader sees it (a deep marker is nested lists; past what
    ``json`` reads, the whole body is unreadable: ``None``)."""
    try:
        return json.loads(encode(value))
    except RecursionError:
        return None


# -- the oracle: what the ledger must hold ---------------------------------------------
def valid(value: Any) -> bool:
    """A token count the budget takes: a non-negative int below 2**53 (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**53


def count(value: Any) -> int:
    return value if valid(value) else 0


def get(value: Any, key: str) -> Any:
    return value.get(key) if isinstance(value, dict) else None


def reported(kind: WireKind, body: Any) -> tuple[int, int]:
    """(input, output) tokens a whole response reports."""
    usage = get(body, "usage")
    if kind == "chat":
        return count(get(usage, "prompt_tokens")), count(get(usage, "completion_tokens"))
    if kind == "responses":
        return count(get(usage, "input_tokens")), count(get(usage, "output_tokens"))
    inp = get(usage, "input_tokens")  # cache reads and writes count as input, on top of it
    cache = count(get(usage, "cache_read_input_tokens")) + count(
        get(usage, "cache_creation_input_tokens")
    )
    total = inp + cache if valid(inp) and valid(inp + cache) else 0  # a sum past 2**53: none
    return total, count(get(usage, "output_tokens"))


def streamed(kind: WireKind, events: list[Any]) -> tuple[int, int]:
    """(input, output) tokens a stream of events reports: the last report wins."""
    inp = out = 0
    for event in events:
        kind_ = get(event, "type")
        if kind == "chat" and get(event, "usage") is not None:
            inp, out = reported("chat", event)
        elif kind == "responses" and kind_ in ("response.completed", "response.incomplete"):
            inp, out = reported("responses", get(event, "response"))
        elif kind == "anthropic" and kind_ == "message_start":
            if get(get(event, "message"), "usage") is not None:
                inp, out = reported("anthropic", get(event, "message"))
        elif kind == "anthropic" and kind_ == "message_delta":
            tokens = get(get(event, "usage"), "output_tokens")
            out = tokens if valid(tokens) else out
    return inp, out


def assert_ledger(ep: Any, turns: int, inp: int, out: int) -> None:
    used = ep.state.used
    assert used["turns"] == turns
    assert used["input_tokens"] == inp and used["output_tokens"] == out
    assert math.isfinite(used["cost_usd"]) and used["cost_usd"] >= 0
    assert {str(m.kind) for m in ep.mistakes} <= MISTAKES
    assistant = [m for m in ep.transcript if isinstance(m, dict) and m.get("role") == "assistant"]
    assert len(assistant) == turns  # every answered turn's message is kept


RELAXED = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# -- the readers, directly (fast: most examples here) ----------------------------------
def episode() -> Any:
    controller = BudgetController(Budget(turns=100))
    return controller, controller.episode()


@settings(RELAXED, max_examples=150)
@given(kind=st.sampled_from(KINDS), bodies=st.lists(st.data(), min_size=1, max_size=3))
def test_whole_bodies_through_the_readers_and_the_turn(kind: WireKind, bodies: list[Any]) -> None:
    drawn = [decoded(b.draw(WHOLE[kind])) for b in bodies]
    _, ep = episode()
    with ep:
        for body in drawn:
            req = TurnRequest(
                ep,
                kind,
                {"model": "gpt-4o", "messages": USER, "tools": TOOLS[kind]},
                DEFAULT_PRICING,
            )
            req.finish(parse_response(kind, body))
        totals = [reported(kind, body) for body in drawn]
        assert_ledger(ep, len(drawn), sum(t[0] for t in totals), sum(t[1] for t in totals))


@settings(RELAXED, max_examples=150)
@given(kind=st.sampled_from(KINDS), data=st.data())
def test_event_streams_through_the_accumulators_and_the_turn(kind: WireKind, data: Any) -> None:
    events = [decoded(e) for e in data.draw(STREAM[kind])]
    _, ep = episode()
    with ep:
        req = TurnRequest(
            ep,
            kind,
            {"model": "gpt-4o", "messages": USER, "stream": True, "tools": TOOLS[kind]},
            DEFAULT_PRICING,
        )
        acc = accumulator(kind)
        for event in events:
            acc.feed(event)
        req.finish(acc.finish())
        assert_ledger(ep, 1, *streamed(kind, events))


# -- through the HTTP transport: bytes, cut anywhere -----------------------------------
class _Chunks(httpx.SyncByteStream):
    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    def __iter__(self) -> Iterator[bytes]:
        yield from self._chunks


def serve(replies: list[tuple[bytes, list[int], bool]]) -> httpx.MockTransport:
    """Answer each request with the next (body, cut points, is a stream)."""
    script = deque(replies)

    def handler(request: httpx.Request) -> httpx.Response:
        body, cuts, is_stream = script.popleft()
        bounds = [0, *sorted({c % (len(body) + 1) for c in cuts}), len(body)]
        chunks = [body[a:b] for a, b in itertools.pairwise(bounds) if b > a]
        ctype = "text/event-stream" if is_stream else "application/json"
        return httpx.Response(200, headers={"content-type": ctype}, stream=_Chunks(chunks))

    return httpx.MockTransport(handler)


ENDINGS = st.sampled_from([b"\n", b"\r\n", b"\r"])
CUTS = st.lists(st.integers(min_value=0, max_value=10**6), max_size=6)


def sse(events: list[Any], end: bytes, noise: list[bool]) -> bytes:
    """An event stream: each event named by its ``type`` (Anthropic's SDK reads only named
    events), with a comment and a stray field before some, then ``[DONE]``."""
    out = b""
    for event, comment in zip(events, noise + [False] * len(events), strict=False):
        if comment:
            out += b": keep-alive" + end + end + b"id: 7" + end
        name = get(event, "type")
        clean = isinstance(name, str) and name.isascii() and name.isprintable() and name
        out += b"event: " + (name.encode() if clean else b"message") + end
        out += b"data: " + encode(event) + end + end
    return out + b"data: [DONE]" + end + end


def good(kind: WireKind) -> tuple[bytes, tuple[int, int]]:
    """A well-formed whole response reporting 5 input and 3 output tokens."""
    if kind == "chat":
        body: Any = {
            "model": "gpt-4o",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "ok"},
                }
            ],
            "usage": {"prompt_tokens": 5, "completion_tokens": 3},
        }
    elif kind == "responses":
        text = {"type": "output_text", "text": "ok"}
        body = {
            "model": "gpt-4o",
            "status": "completed",
            "output": [{"type": "message", "role": "assistant", "content": [text]}],
            "usage": {"input_tokens": 5, "output_tokens": 3},
        }
    else:
        body = {
            "model": ANTHROPIC_MODEL,
            "stop_reason": "end_turn",
            "content": [{"type": "text", "text": "ok"}],
            "usage": {"input_tokens": 5, "output_tokens": 3},
        }
    return json.dumps(body).encode(), (5, 3)


@settings(RELAXED, max_examples=60)
@given(kind=st.sampled_from(KINDS), data=st.data())
def test_a_chain_of_hostile_responses_through_the_transport(kind: WireKind, data: Any) -> None:
    turns = data.draw(st.lists(st.booleans(), min_size=1, max_size=3), label="streamed")
    replies: list[tuple[bytes, list[int], bool]] = []
    expected = [0, 0]
    for is_stream in turns:
        if is_stream:
            events = data.draw(STREAM[kind])
            body = sse(events, data.draw(ENDINGS), data.draw(st.lists(st.booleans(), max_size=3)))
            inp, out = streamed(kind, [decoded(e) for e in events])
        else:
            raw = data.draw(WHOLE[kind])
            body, (inp, out) = encode(raw), reported(kind, decoded(raw))
        replies.append((body, data.draw(CUTS), is_stream))
        expected[0] += inp
        expected[1] += out
    body, (inp, out) = good(kind)
    replies.append((body, data.draw(CUTS), False))

    rig = make_rig()
    url = "http://fake.test" + PATHS[kind]
    request = {"model": "gpt-4o", "max_tokens": 8, "messages": USER, "tools": TOOLS[kind]}
    with rig.controller.episode() as ep:
        with httpx.Client(transport=BudgetTransport(serve(replies), rig.controller)) as http:
            for (sent, _, _), streamed_turn in zip(replies, [*turns, False], strict=True):
                response = http.post(url, json={**request, "stream": streamed_turn})
                assert response.content == sent  # handed on as it came
        assert_ledger(ep, len(replies), expected[0] + inp, expected[1] + out)


# -- through the SDK wrappers: the SDKs' unvalidated models ----------------------------
def _wrapped_call(rig: Any, kind: WireKind, *, stream: bool) -> Any:
    """A call of the wrapped SDK endpoint for ``kind``; reads a stream to its end."""
    if kind == "anthropic":
        from budgetmix.adapters import budgeted as abudgeted

        aclient = abudgeted(rig.anthropic(max_retries=0), rig.controller)
        create: Any = aclient.messages.create
        kwargs: dict[str, Any] = {"model": ANTHROPIC_MODEL, "max_tokens": 8, "messages": USER}
    else:
        from budgetmix.adapters import budgeted

        client = budgeted(rig.openai(max_retries=0), rig.controller)
        if kind == "chat":
            create, kwargs = client.chat.completions.create, {"model": "gpt-4o", "messages": USER}
        else:
            create, kwargs = client.responses.create, {"model": "gpt-4o", "input": USER}
    kwargs["tools"] = TOOLS[kind]

    def call(*, streamed: bool = stream) -> None:
        result = create(**kwargs, stream=streamed)
        if streamed:
            for _ in result:
                pass

    return call


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("kind", KINDS)
@settings(RELAXED, max_examples=25)
@given(data=st.data())
def test_a_chain_of_hostile_responses_through_the_sdk_wrappers(
    kind: WireKind, stream: bool, data: Any
) -> None:
    """The SDKs build their models from such bodies without validating them: whatever
    they hand over, the outcome is a response or a budgetmix error, and the ledger holds."""
    if stream:
        drawn = [data.draw(STREAM[kind]) for _ in range(data.draw(st.integers(1, 2)))]
        sse_type = {"content-type": "text/event-stream"}
        replies = [Reply(body=sse(e, data.draw(ENDINGS), []), headers=sse_type) for e in drawn]
        totals = [streamed(kind, [decoded(x) for x in e]) for e in drawn]
    else:
        bodies = data.draw(st.lists(WHOLE[kind], min_size=1, max_size=2))
        replies = [Reply(body=encode(b)) for b in bodies]
        totals = [reported(kind, decoded(b)) for b in bodies]
    rig = make_rig([*replies, Reply.say("ok", input_tokens=5, output_tokens=3)])
    call = _wrapped_call(rig, kind, stream=stream)
    answered, expected = 0, [0, 0]
    with rig.controller.episode() as ep:
        for inp, out in totals:
            try:
                call()
            except BudgetmixError:  # unreadable: ResponseFormatError or ProviderError, given back
                continue
            answered += 1
            expected[0] += inp
            expected[1] += out
        assert ep.state.used["turns"] == answered
        assert ep.state.used["input_tokens"] == expected[0]
        assert ep.state.used["output_tokens"] == expected[1]
        before = dict(ep.state.used)
        call(streamed=False)  # the chain goes on; the good turn counts exactly what it reported
        used = ep.state.used
        assert used["turns"] == answered + 1
        assert used["input_tokens"] - before["input_tokens"] == 5
        assert used["output_tokens"] - before["output_tokens"] == 3
        assert {str(m.kind) for m in ep.mistakes} <= MISTAKES
