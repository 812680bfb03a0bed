"""Hostile responses and requests through the SDK wrappers and the HTTP transport.

Each test names one attack; it fails if the attack succeeds: a ``RecursionError`` (or
any error from outside the budgetmix tree) out of ``create()``, a turn charged with no
mistake, an error that blames the provider for what was never sent, a body read
without bound, or an event stream read in quadratic time.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from _provider_fakes import ANTHROPIC_MODEL, CHAT_TOOLS, chat_request, kinds, make_rig, transport
from budgetmix import ConfigError, ResponseFormatError
from budgetmix.adapters.base import ToolCallRequest
from budgetmix.adapters.testing import Reply

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

USER = [{"role": "user", "content": "hi"}]
DEEP = 100_000
NESTED = "[" * DEEP + "]" * DEEP


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


def test_a_response_body_nested_100k_deep_is_a_response_format_error_through_the_transport() -> (
    None
):
    body = b'{"choices": [{"message": {"content": ' + NESTED.encode() + b"}}]}"
    rig = make_rig([Reply(body=body), Reply.say("ok")])
    with rig.controller.episode() as ep, httpx.Client(transport=transport(rig)) as http:
        with pytest.raises(ResponseFormatError) as info:  # as through the wrapper, below
            http.post("http://fake.test/v1/chat/completions", json=chat_request())
        second = http.post("http://fake.test/v1/chat/completions", json=chat_request())
    assert "could not be read" in str(info.value) and "nest" in str(info.value)
    assert second.status_code == 200
    assert kinds(ep) == ["provider_error"] and ep.state.used["turns"] == 1


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
