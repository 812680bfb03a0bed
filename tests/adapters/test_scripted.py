"""The shipped test doubles: scripted model, fault injection, scripted agent, network guard."""

from __future__ import annotations

import socket
import threading
from collections.abc import Sequence

import pytest
from budgetmix import Budget, EpisodeStatus, MistakeKind
from budgetmix.adapters import (
    AsyncChatModel,
    ChatMessage,
    ChatModel,
    FailingModel,
    MistakeThenRecover,
    ModelResponse,
    NetworkBlockedError,
    ScriptedModel,
    ScriptExhaustedError,
    ToolSpec,
    TransientModelError,
    Usage,
    block_network,
    final_answer,
    run_agent,
    tool_call,
    tool_calls,
)
from budgetmix.exceptions import ConfigError
from budgetmix.provider_errors import classify_exception

HELLO = [ChatMessage(role="user", content="hello")]


def test_plays_the_script_and_records_requests() -> None:
    model = ScriptedModel([final_answer("one"), final_answer("two", usage=Usage(5, 2))])
    assert isinstance(model, ChatModel) and isinstance(model, AsyncChatModel)
    first = model.complete(HELLO, [], notice="N1")
    second = model.complete(HELLO, [], notice=None, tool_choice="none")
    assert (first.text, second.text) == ("one", "two")
    assert first.model == "scripted-model"
    assert first.usage is not None and first.usage.input_tokens > 0  # estimated
    assert second.usage == Usage(5, 2)  # scripted usage is kept
    assert model.notices == ["N1", None]
    assert [r.tool_choice for r in model.requests] == ["auto", "none"]
    with pytest.raises(ScriptExhaustedError):
        model.complete(HELLO, [], notice=None)


async def test_async_twin_records_the_same() -> None:
    model = ScriptedModel([final_answer("x")])
    response = await model.acomplete(HELLO, [], notice="N")
    assert response.text == "x" and model.requests[0].notice == "N"


def test_responder_function_sees_tool_choice_when_it_asks() -> None:
    seen: list[str] = []

    def with_choice(
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
        notice: str | None,
        *,
        tool_choice: str,
    ) -> ModelResponse:
        seen.append(tool_choice)
        return final_answer(str(len(messages)))

    def without(
        messages: Sequence[ChatMessage], tools: Sequence[ToolSpec], notice: str | None
    ) -> ModelResponse:
        return final_answer(notice or "")

    assert (
        ScriptedModel(with_choice).complete(HELLO, [], notice=None, tool_choice="none").text == "1"
    )
    assert seen == ["none"]
    assert ScriptedModel(without).complete(HELLO, [], notice="N").text == "N"


def test_script_entries_must_be_responses() -> None:
    with pytest.raises(ConfigError):
        ScriptedModel(["not a response"])  # type: ignore[list-item]


def test_tool_call_helpers() -> None:
    call = tool_call("add", {"a": 1}, id="x")
    assert (call.id, call.name, call.arguments) == ("x", "add", '{"a": 1}')
    assert tool_call("add").arguments == "{}"
    assert tool_call("a").id != tool_call("a").id
    response = tool_calls(call, call)
    assert response.finish_reason == "tool_calls" and len(response.tool_calls) == 2


def test_failing_model_raises_transient_errors_then_delegates() -> None:
    model = FailingModel(ScriptedModel([final_answer("ok")]), failures=2)
    for _ in range(2):
        with pytest.raises(TransientModelError) as info:
            model.complete(HELLO, [], notice=None)
        assert classify_exception(info.value).transient
    assert model.complete(HELLO, [], notice=None).text == "ok"
    assert model.attempts == 3
    assert model.inner.calls == 1  # type: ignore[union-attr]


def test_failing_model_with_a_custom_error() -> None:
    model = FailingModel(ScriptedModel([]), failures=1, error=lambda: ValueError("bad request"))
    with pytest.raises(ValueError):
        model.complete(HELLO, [], notice=None)
    assert not classify_exception(ValueError()).transient


def lookup(key: str) -> str:
    """Look a key up."""
    return key * 2


def test_mistake_then_recover_is_seeded_and_always_recovers() -> None:
    plan = [("lookup", {"key": k}) for k in "abcdef"]

    def play(seed: int) -> tuple[tuple[str, ...], EpisodeStatus, int]:
        agent = MistakeThenRecover(plan, "done", mistake_rate=0.5, seed=seed)
        run = run_agent(ScriptedModel(agent), [lookup], "go", Budget(turns=30))
        kinds = tuple(str(m.kind) for m in run.result.mistakes)
        return kinds, run.status, len(run.result.recoveries)

    kinds, status, recoveries = play(3)
    assert play(3) == (kinds, status, recoveries)
    assert status is EpisodeStatus.SUCCESS
    assert kinds and recoveries == len(kinds)  # every mistake is followed by a correct call
    assert set(kinds) <= {
        MistakeKind.INVALID_TOOL_ARGUMENTS,
        MistakeKind.UNKNOWN_TOOL,
    }
    assert play(4) != (kinds, status, recoveries)


def test_mistake_then_recover_answers_on_the_grace_turn() -> None:
    agent = MistakeThenRecover([("lookup", {"key": "a"})] * 5, "42", mistake_rate=0.0)
    run = run_agent(ScriptedModel(agent), [lookup], "go", Budget(turns=2), exhaustion="grace")
    assert run.output == "Best effort: 42" and run.result.grace_turn


def test_mistake_then_recover_validates() -> None:
    with pytest.raises(ConfigError, match="mistake_rate"):
        MistakeThenRecover([], "x", mistake_rate=1.5)
    with pytest.raises(ConfigError, match="style"):
        MistakeThenRecover([], "x", styles=["typo"])  # type: ignore[list-item]


def test_block_network_refuses_remote_hosts_and_allows_loopback() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    accepted = threading.Thread(target=lambda: server.accept()[0].close())
    accepted.start()
    try:
        with block_network():
            with pytest.raises(NetworkBlockedError):
                socket.create_connection(("example.com", 443), timeout=1)
            with pytest.raises(NetworkBlockedError), socket.socket() as s:
                s.connect(("93.184.216.34", 443))
            with block_network():  # re-entrant
                socket.create_connection(("127.0.0.1", port), timeout=5).close()
        assert socket.getaddrinfo is not None
    finally:
        accepted.join(timeout=5)
        server.close()
    assert socket.socket.connect.__qualname__ == "socket.connect"  # restored
