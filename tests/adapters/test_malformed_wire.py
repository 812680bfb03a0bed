"""Malformed provider bodies through the HTTP transport (the one path where raw JSON,
not an SDK's validated model, reaches budgetmix's parsers): whatever a server sends in
the fields the budget reads, the request is charged and answered, never crashed."""

from __future__ import annotations

import json
from typing import Any

import httpx
from _provider_fakes import ANTHROPIC_MODEL, make_rig
from budgetmix.adapters.http import BudgetTransport
from budgetmix.adapters.testing import Reply
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=4),
    lambda kids: (
        st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=4), kids, max_size=3)
    ),
    max_leaves=6,
)


def maybe(shape: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """The real shape, or any JSON value in its place."""
    return st.one_of(shape, JSON)


def obj(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return maybe(st.fixed_dictionaries(fields))


def some(shape: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return maybe(st.lists(shape, max_size=2))


USAGE = {"usage": JSON}
CHAT = st.fixed_dictionaries(
    {
        "model": JSON,
        "choices": some(
            obj(
                finish_reason=JSON,
                index=JSON,
                message=obj(
                    content=JSON,
                    tool_calls=some(obj(id=JSON, function=obj(name=JSON, arguments=JSON))),
                ),
                delta=obj(
                    content=JSON,
                    tool_calls=some(
                        obj(index=JSON, id=JSON, function=obj(name=JSON, arguments=JSON))
                    ),
                ),
            )
        ),
        "usage": obj(prompt_tokens=JSON, completion_tokens=JSON, prompt_tokens_details=JSON),
    }
)
RESPONSES = st.fixed_dictionaries(
    {
        "model": JSON,
        "status": JSON,
        "incomplete_details": JSON,
        "output": some(
            obj(type=st.sampled_from(["message", "function_call"]) | JSON, content=JSON)
        ),
        **USAGE,
    }
)
ANTHROPIC = st.fixed_dictionaries(
    {
        "model": JSON,
        "stop_reason": JSON,
        "content": some(obj(type=st.sampled_from(["text", "tool_use"]) | JSON, input=JSON)),
        "usage": obj(input_tokens=JSON, output_tokens=JSON, cache_read_input_tokens=JSON),
    }
)
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "anthropic": "/v1/messages"}
EVENTS = st.lists(
    CHAT
    | st.fixed_dictionaries(
        {"type": st.sampled_from(["response.completed", "message_start"]) | JSON, "index": JSON}
    ),
    max_size=3,
)

RELAXED = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def post(kind: str, reply: Reply, *, stream: bool = False) -> None:
    rig = make_rig([reply])
    request = {"model": "gpt-4o", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    if stream:
        request["stream"] = True
    with rig.controller.episode() as ep:
        with httpx.Client(transport=BudgetTransport(rig.net, rig.controller)) as http:
            response = http.post("http://fake.test" + PATHS[kind], json=request)
            response.read()
        assert ep.state.used["turns"] == 1
    assert rig.net.count == 1


@RELAXED
@given(body=st.one_of(CHAT, JSON))
def test_chat_completions(body: Any) -> None:
    post("chat", Reply(body=json.dumps(body).encode()))


@RELAXED
@given(body=st.one_of(RESPONSES, JSON))
def test_responses(body: Any) -> None:
    post("responses", Reply(body=json.dumps(body).encode()))


@RELAXED
@given(body=st.one_of(ANTHROPIC, JSON))
def test_anthropic_messages(body: Any) -> None:
    post("anthropic", Reply(body=json.dumps(body).encode()))


@RELAXED
@given(kind=st.sampled_from(sorted(PATHS)), events=EVENTS)
def test_event_streams(kind: str, events: list[Any]) -> None:
    sse = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    post(kind, Reply(body=sse, headers={"content-type": "text/event-stream"}), stream=True)


def _innermost_file(exc: BaseException) -> str:
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_code.co_filename if tb is not None else ""


@RELAXED
@given(body=CHAT)
def test_chat_completions_through_the_sdk_wrapper(body: Any) -> None:
    """The OpenAI SDK builds its response objects from such bodies without validating
    them: whatever it hands over, budgetmix's reading of it never raises (the SDK may
    raise its own errors; those are the caller's, as without budgetmix)."""
    from budgetmix.adapters import budgeted

    rig = make_rig([Reply(body=json.dumps(body).encode())])
    client = budgeted(rig.openai(max_retries=0), rig.controller)
    with rig.controller.episode() as ep:
        try:
            client.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
            )
        except Exception as exc:  # the SDK's own error, never one raised inside budgetmix
            assert "budgetmix" not in _innermost_file(exc), repr(exc)
        assert ep.state.used["turns"] == 1


@RELAXED
@given(body=ANTHROPIC)
def test_anthropic_messages_through_the_sdk_wrapper(body: Any) -> None:
    """The same for the Anthropic SDK's ``messages.create``."""
    from budgetmix.adapters import budgeted

    rig = make_rig([Reply(body=json.dumps(body).encode())])
    client = budgeted(rig.anthropic(max_retries=0), rig.controller)
    with rig.controller.episode() as ep:
        try:
            client.messages.create(
                model=ANTHROPIC_MODEL,
                max_tokens=8,
                messages=[{"role": "user", "content": "hi"}],
            )
        except Exception as exc:
            assert "budgetmix" not in _innermost_file(exc), repr(exc)
        assert ep.state.used["turns"] == 1
