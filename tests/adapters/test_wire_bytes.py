"""The wrappers send a plain-JSON history (with the notice) through ``extra_body``,
without the SDK's per-message transform, which is the identity for plain JSON. These
tests pin that the bytes on the wire are the same as when the SDK transforms the whole
list itself, with and without ``sdk_transform``."""

from __future__ import annotations

from typing import Any

import pytest
from _provider_fakes import ANTHROPIC_MODEL, ANTHROPIC_TOOLS, CHAT_TOOLS, make_rig
from budgetmix.adapters import budgeted
from budgetmix.adapters import budgeted as budgeted_anthropic

pytest.importorskip("openai")
pytest.importorskip("anthropic")

CHAT_HISTORY: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief. ü ✓"},
    {"role": "user", "content": [{"type": "text", "text": "what is 1+2?"}]},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "3"},
]
ANTHROPIC_HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": "what is 1+2?"},
    {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "t1", "name": "add", "input": {}}],
    },
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "3"}]},
]


def sent_bodies(send: Any, histories: list[Any], make: Any) -> list[bytes]:
    """The request bytes of one call per history, each in a fresh episode of a fresh rig."""
    bodies = []
    for history in histories:
        rig = make_rig()
        client = make(rig)
        with rig.controller.episode():
            send(client, history)
        bodies.append(rig.fake.requests[-1].body)
    return bodies


@pytest.fixture
def create_calls(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The keyword arguments each call of the OpenAI SDK's ``chat.completions.create``
    gets, seen the way instrumentation that patches it sees them."""
    from openai.resources.chat.completions import Completions

    calls: list[dict[str, Any]] = []
    original = Completions.create

    def recording(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Completions, "create", recording)
    return calls


def as_tuple(history: list[Any]) -> Any:
    return tuple(history)  # not a list: the wrapper hands the whole list to the SDK


@pytest.mark.parametrize("sdk_transform", [False, True])
@pytest.mark.parametrize("extra_body", [None, {"metadata_x": 1}])
def test_chat_bytes_match_the_sdk_path(
    extra_body: dict[str, Any] | None, sdk_transform: bool
) -> None:
    def send(client: Any, history: Any) -> None:
        kw = {} if extra_body is None else {"extra_body": extra_body}
        client.chat.completions.create(model="gpt-4o", messages=history, tools=CHAT_TOOLS, **kw)

    fast, sdk = sent_bodies(
        send,
        [CHAT_HISTORY, as_tuple(CHAT_HISTORY)],
        lambda rig: budgeted(rig.openai(), rig.controller, sdk_transform=sdk_transform),
    )
    assert fast == sdk and b"Budget (v1)" in fast
    if extra_body is not None:
        assert b'"metadata_x":1' in fast


def test_responses_bytes_match_the_sdk_path() -> None:
    history = [{"role": "user", "content": "hi"}]

    def send(client: Any, items: Any) -> None:
        client.responses.create(model="gpt-4o", input=items)

    fast, sdk = sent_bodies(
        send, [history, as_tuple(history)], lambda rig: budgeted(rig.openai(), rig.controller)
    )
    assert fast == sdk and b"Budget (v1)" in fast


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_bytes_match_the_sdk_path(stream: bool) -> None:
    def send(client: Any, history: Any) -> None:
        kw: dict[str, Any] = {"model": ANTHROPIC_MODEL, "max_tokens": 64, "messages": history}
        if stream:
            with client.messages.stream(**kw, tools=ANTHROPIC_TOOLS) as s:
                s.get_final_message()
        else:
            client.messages.create(**kw, tools=ANTHROPIC_TOOLS)

    fast, sdk = sent_bodies(
        send,
        [ANTHROPIC_HISTORY, as_tuple(ANTHROPIC_HISTORY)],
        lambda rig: budgeted_anthropic(rig.anthropic(), rig.controller),
    )
    assert fast == sdk and b"Budget (v1)" in fast


@pytest.mark.parametrize("sdk_transform", [False, True])
def test_what_code_patching_the_sdk_sees(
    create_calls: list[dict[str, Any]], sdk_transform: bool
) -> None:
    """Instrumentation that patches the SDK's ``create`` sees an empty history by default
    (the SDK has nothing to transform; the history rides in ``extra_body``) and the
    caller's own list with ``sdk_transform=True``. What is sent is the same either way."""
    rig = make_rig()
    client = budgeted(rig.openai(), rig.controller, sdk_transform=sdk_transform)
    with rig.controller.episode():
        client.chat.completions.create(model="gpt-4o", messages=CHAT_HISTORY)
    (kwargs,) = create_calls
    sent = rig.fake.requests[-1].json["messages"]
    assert sent[:-1] == CHAT_HISTORY and sent[-1]["content"].startswith("Budget (v1)")
    assert kwargs["messages"] == (CHAT_HISTORY if sdk_transform else [])
    assert kwargs["extra_body"]["messages"] == sent


def test_the_callers_extra_body_is_kept_next_to_the_notice() -> None:
    rig = make_rig()
    client = budgeted(rig.openai(), rig.controller)
    with rig.controller.episode():
        client.chat.completions.create(
            model="gpt-4o", messages=CHAT_HISTORY, extra_body={"temperature": 0}
        )
    body = rig.fake.requests[-1].json
    assert body["messages"][:-1] == CHAT_HISTORY and body["temperature"] == 0
    assert body["messages"][-1]["content"].startswith("Budget (v1)")


def test_sdk_objects_in_the_history_take_the_sdks_own_path() -> None:
    """A response message passed back as is (a pydantic model, the common pattern) is
    not plain JSON: the SDK transforms the whole list, and the bytes are what the SDK
    itself sends for that history plus the notice."""
    from openai.types.chat import ChatCompletionMessage

    message = ChatCompletionMessage.model_validate(
        {"role": "assistant", "content": None, "tool_calls": CHAT_HISTORY[2]["tool_calls"]}
    )
    history = [*CHAT_HISTORY[:2], message, CHAT_HISTORY[3]]
    rig = make_rig()
    client = budgeted(rig.openai(), rig.controller)
    with rig.controller.episode():
        client.chat.completions.create(model="gpt-4o", messages=history)
    wrapped = rig.fake.requests[-1]
    notice = {"role": "user", "content": wrapped.json["messages"][-1]["content"]}
    assert notice["content"].startswith("Budget (v1)")

    by_hand = make_rig()
    by_hand.openai().chat.completions.create(model="gpt-4o", messages=[*history, notice])
    assert wrapped.body == by_hand.fake.requests[-1].body
    assert wrapped.json["messages"][2]["tool_calls"][0]["id"] == "c1"


def test_values_nested_in_a_message_are_checked_too() -> None:
    """A dict message is plain JSON only if everything inside it is: content parts
    given as a generator (which the SDK turns into a list, and JSON cannot encode) send
    the same bytes as the SDK's own path instead of failing."""

    def history() -> list[Any]:
        parts = ({"type": "text", "text": t} for t in ("what is", " 1+2?"))
        return [CHAT_HISTORY[0], {"role": "user", "content": parts}]

    def send(client: Any, items: Any) -> None:
        client.chat.completions.create(model="gpt-4o", messages=items)

    ours, sdk = sent_bodies(
        send, [history(), as_tuple(history())], lambda rig: budgeted(rig.openai(), rig.controller)
    )
    assert ours == sdk and b"Budget (v1)" in ours and b'" 1+2?"' in ours


def test_messages_that_are_not_dicts_take_the_sdks_own_path() -> None:
    """A message given as another Mapping (which the SDK accepts and JSON cannot encode)
    sends the same bytes as the SDK's own path instead of failing."""
    from types import MappingProxyType

    history = [CHAT_HISTORY[0], MappingProxyType({"role": "user", "content": "what is 1+2?"})]

    def send(client: Any, items: Any) -> None:
        client.chat.completions.create(model="gpt-4o", messages=items)

    ours, sdk = sent_bodies(
        send, [history, as_tuple(history)], lambda rig: budgeted(rig.openai(), rig.controller)
    )
    assert ours == sdk and b"Budget (v1)" in ours and b"what is 1+2?" in ours


def test_the_loops_openai_model_sends_the_same_bytes_without_the_transform(
    create_calls: list[dict[str, Any]],
) -> None:
    """``OpenAIChatModel`` (the built-in loop's) builds plain-JSON messages, so they skip
    the SDK's transform the same way; ``sdk_transform=True`` hands them to the SDK."""
    from budgetmix.adapters.base import ChatMessage, ToolCallRequest, ToolSpec
    from budgetmix.adapters.openai import OpenAIChatModel

    history = [
        ChatMessage(role="system", content="Be brief. ü"),
        ChatMessage(role="user", content="what is 1+2?"),
        ChatMessage(
            role="assistant", tool_calls=(ToolCallRequest(id="c1", name="add", arguments="{}"),)
        ),
        ChatMessage(role="tool", content="3", tool_call_id="c1"),
    ]
    tool = ToolSpec(name="add", description="Add.", parameters={"type": "object"})
    bodies = []
    for sdk_transform in (False, True):
        rig = make_rig()
        model = OpenAIChatModel(
            rig.openai(), "gpt-4o", request_options={"temperature": 0}, sdk_transform=sdk_transform
        )
        model.complete(history, [tool], notice="NOTICE")
        bodies.append(rig.fake.requests[-1].body)
    assert bodies[0] == bodies[1] and b'"content":"NOTICE"' in bodies[0]
    seen = [call["messages"] for call in create_calls]
    assert seen[0] == [] and len(seen[1]) == 5


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("sdk_transform", [False, True])
async def test_async_chat_bytes_match_the_sdk_path(stream: bool, sdk_transform: bool) -> None:
    """The async client, whole and streamed (``stream_options`` added), sends the same
    bytes whether the history skips the SDK's transform or takes it."""
    bodies = []
    for history in (CHAT_HISTORY, as_tuple(CHAT_HISTORY)):
        rig = make_rig()
        client = budgeted(rig.openai(is_async=True), rig.controller, sdk_transform=sdk_transform)
        async with rig.controller.episode():
            reply = await client.chat.completions.create(
                model="gpt-4o", messages=history, tools=CHAT_TOOLS, stream=stream
            )
            if stream:
                async for _ in reply:
                    pass
        bodies.append(rig.fake.requests[-1].body)
    assert bodies[0] == bodies[1] and b"Budget (v1)" in bodies[0]
    assert (b'"include_usage":true' in bodies[0]) == stream
