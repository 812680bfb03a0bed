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

import itertools
import json
from collections import deque
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from _hostile_values import (
    INVALID_USAGE,
    KINDS,
    MISTAKES,
    PATHS,
    RELAXED,
    STREAM,
    TOOLS,
    USER,
    WHOLE,
    assert_ledger,
    decoded,
    encode,
    get,
    reported,
    streamed,
)
from _provider_fakes import ANTHROPIC_MODEL, make_rig
from budgetmix import Budget, BudgetController, BudgetmixError, ResponseFormatError
from budgetmix.adapters._turn import TurnRequest
from budgetmix.adapters._wire import WireKind, accumulator, parse_response
from budgetmix.adapters.http import BudgetTransport
from budgetmix.adapters.pricing import DEFAULT_PRICING
from budgetmix.adapters.testing import Reply
from hypothesis import given, settings
from hypothesis import strategies as st


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
    readable: list[bool] = []
    expected = [0, 0]
    answered = 1  # the good last one
    INVALID_USAGE.clear()
    for is_stream in turns:
        if is_stream:
            events = data.draw(STREAM[kind])
            body = sse(events, data.draw(ENDINGS), data.draw(st.lists(st.booleans(), max_size=3)))
            # an event that cannot be read is a ResponseFormatError, as unstreamed (issue 30)
            readable.append(all(_readable(encode(e)) for e in events))
            inp, out = streamed(kind, [decoded(e) for e in events])
        else:
            raw = data.draw(WHOLE[kind])
            body, (inp, out) = encode(raw), reported(kind, decoded(raw))
            readable.append(_readable(body))
        replies.append((body, data.draw(CUTS), is_stream))
        if readable[-1]:  # else refused as the wrappers refuse it
            answered += 1
            expected[0] += inp
            expected[1] += out
    body, (inp, out) = good(kind)
    replies.append((body, data.draw(CUTS), False))

    rig = make_rig()
    url = "http://fake.test" + PATHS[kind]
    request = {"model": "gpt-4o", "max_tokens": 8, "messages": USER, "tools": TOOLS[kind]}
    with rig.controller.episode() as ep:
        with httpx.Client(transport=BudgetTransport(serve(replies), rig.controller)) as http:
            flags = zip([*turns, False], [*readable, True], strict=True)
            for (sent, _, _), (streamed_turn, ok) in zip(replies, flags, strict=True):
                if ok:
                    response = http.post(url, json={**request, "stream": streamed_turn})
                    assert response.content == sent  # handed on as it came
                    continue
                with pytest.raises(ResponseFormatError):  # given back, as by the wrappers
                    http.post(url, json={**request, "stream": streamed_turn})
        assert_ledger(ep, answered, expected[0] + inp, expected[1] + out)


def _readable(body: bytes) -> bool:
    """Whether a whole body is JSON the transport can read (else a ResponseFormatError)."""
    try:
        json.loads(body)
    except (ValueError, RecursionError):
        return False
    return True


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


#: The Anthropic SDK builds ``Optional[int]`` usage fields leniently: a JSON ``true`` in
#: them reaches the wrapper as ``1`` (``input_tokens``, a plain ``int``, stays ``True``).
_ANTHROPIC_OPTIONAL_COUNTS = ("cache_read_input_tokens", "cache_creation_input_tokens")


def sdk_seen(kind: WireKind, body: Any) -> Any:
    """``body`` as the SDK object the wrapper reads holds it (the oracle of that path)."""
    usage = body.get("usage") if isinstance(body, dict) else None
    if kind != "anthropic" or not isinstance(usage, dict):
        return body
    fixed = {
        k: int(v) if k in _ANTHROPIC_OPTIONAL_COUNTS and isinstance(v, bool) else v
        for k, v in usage.items()
    }
    return {**body, "usage": fixed}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("kind", KINDS)
@settings(RELAXED, max_examples=25)
@given(data=st.data())
def test_a_chain_of_hostile_responses_through_the_sdk_wrappers(
    kind: WireKind, stream: bool, data: Any
) -> None:
    """The SDKs build their models from such bodies without validating them: whatever
    they hand over, the outcome is a response or a budgetmix error, and the ledger holds."""
    INVALID_USAGE.clear()
    if stream:
        drawn = [data.draw(STREAM[kind]) for _ in range(data.draw(st.integers(1, 2)))]
        sse_type = {"content-type": "text/event-stream"}
        replies = [Reply(body=sse(e, data.draw(ENDINGS), []), headers=sse_type) for e in drawn]
        totals = [streamed(kind, [decoded(x) for x in e]) for e in drawn]
    else:
        bodies = data.draw(st.lists(WHOLE[kind], min_size=1, max_size=2))
        replies = [Reply(body=encode(b)) for b in bodies]
        totals = [reported(kind, sdk_seen(kind, decoded(b))) for b in bodies]
    rig = make_rig([*replies, Reply.say("ok", input_tokens=5, output_tokens=3)])
    call = _wrapped_call(rig, kind, stream=stream)
    answered, expected = 0, [0, 0]
    estimated = bool(INVALID_USAGE)  # usage that is no count: charged by estimate (issue 30)
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
        if estimated:
            assert ep.state.used["input_tokens"] >= expected[0]
            assert ep.state.used["output_tokens"] >= expected[1]
        else:
            assert ep.state.used["input_tokens"] == expected[0]
            assert ep.state.used["output_tokens"] == expected[1]
        before = dict(ep.state.used)
        call(streamed=False)  # the chain goes on; the good turn counts exactly what it reported
        used = ep.state.used
        assert used["turns"] == answered + 1
        assert used["input_tokens"] - before["input_tokens"] == 5
        assert used["output_tokens"] - before["output_tokens"] == 3
        assert {str(m.kind) for m in ep.mistakes} <= MISTAKES
