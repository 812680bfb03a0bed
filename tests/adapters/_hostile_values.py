"""Hypothesis strategies for hostile provider responses, and the oracle of what the
ledger must hold after them (for ``test_properties_wire.py``).

Values of any type and shape (huge and negative numbers, NaN, lone surrogates, nesting
far past Python's recursion limit), whole bodies and event streams in the three wire
formats, real responses mutated field by field, and what a turn must count for each.
"""

from __future__ import annotations

import copy
import json
import math
import re
from typing import Any

from _provider_fakes import ANTHROPIC_TOOLS, CHAT_TOOLS, RESPONSES_TOOLS
from budgetmix import MistakeKind
from budgetmix.adapters._wire import WireKind
from budgetmix.adapters.base import ToolCallRequest
from budgetmix.adapters.testing import FakeLLMServer, Reply
from hypothesis import HealthCheck, settings
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


#: Usage values the oracle met that are there but are no count: budgetmix charges an
#: estimate for those (issue 30), so the ledger then holds at least the oracle's figures.
INVALID_USAGE: list[Any] = []


def count(value: Any) -> int:
    if valid(value):
        return int(value)
    if value is not None:
        INVALID_USAGE.append(value)
    return 0


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
    if inp is not None and not valid(inp):
        INVALID_USAGE.append(inp)
    total = inp + cache if valid(inp) and valid(inp + cache) else 0  # a sum past 2**53: none
    if valid(inp) and not valid(inp + cache):
        INVALID_USAGE.append(inp + cache)
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
            if tokens is not None and not valid(tokens):
                INVALID_USAGE.append(tokens)
            out = tokens if valid(tokens) else out
    return inp, out


def assert_ledger(ep: Any, turns: int, inp: int, out: int) -> None:
    used = ep.state.used
    assert used["turns"] == turns
    if INVALID_USAGE:  # charged by estimate on top of the valid counts
        INVALID_USAGE.clear()
        assert used["input_tokens"] >= inp and used["output_tokens"] >= out
    else:
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
