"""Traces with the real SDKs over the loopback server (issue 31): a wrapped Anthropic
client's own spans are off (the tokens are counted once), HTTP-instrumentation spans
nest under the call's ``chat`` span, a tool run through ``controller.tool`` that the wire
sees too has one ``execute_tool`` span, a failed wire tool span explains itself, the
chat span names its provider and server, and the wirings that bypass the budget say so."""

from __future__ import annotations

import json
import logging
from typing import Any
from urllib.parse import urlsplit

import pytest
from _integration_support import Spans, framework
from budgetmix import Budget, BudgetController, ConfigError
from budgetmix.adapters import budgeted
from budgetmix.adapters.http import BudgetTransport
from budgetmix.adapters.testing import FakeLLMServer, Reply
from opentelemetry.trace import StatusCode

anthropic = framework("anthropic")
openai = framework("openai")
httpx = framework("httpx")

ANTHROPIC_SCOPE = "com.anthropic.sdk.python"  # the SDK's own spans
ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        },
    },
}
DIVIDE = {
    "name": "divide",
    "input_schema": {"type": "object", "properties": {"a": {"type": "number"}}},
}


def _port(server: FakeLLMServer) -> int | None:
    return urlsplit(server.root_url).port


def _tokens(spans: Spans, key: str) -> int:
    return sum(int(s.attributes.get(key, 0)) for s in spans.finished() if s.attributes)


def test_a_wrapped_anthropic_client_counts_each_call_once(
    server: FakeLLMServer, spans: Spans
) -> None:
    raw = anthropic.Anthropic(
        api_key="test",
        base_url=server.root_url,
        max_retries=0,
        open_telemetry={"tracer_provider": spans.provider},  # the SDK traces its calls
    )
    server.push(Reply.say("hello"), Reply.say("again"))
    raw.messages.create(
        model="claude-test", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
    )
    assert [s.instrumentation_scope.name for s in spans.finished()] == [ANTHROPIC_SCOPE]
    spans.exporter.clear()
    controller = BudgetController(Budget(turns=3), tracer_provider=spans.provider)
    client = budgeted(raw, controller)
    with controller.episode() as ep:
        client.messages.create(
            model="claude-test", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
        )
        ep.finish(True)
    assert ep.result is not None
    assert ANTHROPIC_SCOPE not in {s.instrumentation_scope.name for s in spans.finished()}
    used = ep.result.used
    assert _tokens(spans, "gen_ai.usage.input_tokens") == used["input_tokens"] > 0
    assert _tokens(spans, "gen_ai.usage.output_tokens") == used["output_tokens"] > 0
    (chat,) = spans.named("chat")
    a = chat.attributes or {}
    assert a["gen_ai.provider.name"] == "anthropic"  # no provider_name= given
    assert a["server.address"] == "127.0.0.1" and a["server.port"] == _port(server)
    assert str(a["gen_ai.response.id"]).startswith("msg_")
    assert tuple(a["gen_ai.response.finish_reasons"]) == ("stop",)  # Anthropic's end_turn


def test_http_instrumentation_spans_nest_under_the_chat_span(
    server: FakeLLMServer, spans: Spans
) -> None:
    framework("opentelemetry.instrumentation.httpx")
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

    http = httpx.Client()
    HTTPXClientInstrumentor.instrument_client(http, tracer_provider=spans.provider)
    controller = BudgetController(Budget(turns=3), tracer_provider=spans.provider)
    client = budgeted(
        openai.OpenAI(api_key="test", base_url=server.base_url, http_client=http), controller
    )
    server.push(Reply.say("hello"))
    with controller.episode() as ep:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
        ep.finish(True)
    (chat,) = spans.named("chat")
    (post,) = [s for s in spans.finished() if s.name == "POST"]
    assert post.parent is not None and post.parent.span_id == chat.context.span_id
    assert post.context.trace_id == chat.context.trace_id
    a = chat.attributes or {}
    assert a["gen_ai.provider.name"] == "openai" and a["server.port"] == _port(server)
    assert str(a["gen_ai.response.id"]).startswith("chatcmpl")


def test_a_tool_run_through_controller_tool_has_one_span(
    server: FakeLLMServer, spans: Spans
) -> None:
    controller = BudgetController(
        Budget(turns=3, tool_calls=3), tracer_provider=spans.provider, capture_content=True
    )

    @controller.tool
    def add(a: int, b: int) -> int:
        return a + b

    client = budgeted(openai.OpenAI(api_key="test", base_url=server.base_url), controller)
    server.push(Reply.call("add", {"a": 1, "b": 2}), Reply.say("3"))
    messages: list[Any] = [{"role": "user", "content": "1+2?"}]
    with controller.episode() as ep:
        for _ in range(3):
            reply = client.chat.completions.create(model="gpt-4o", messages=messages, tools=[ADD])
            message = reply.choices[0].message
            if not message.tool_calls:
                break
            messages.append(message.model_dump(exclude_none=True))
            for tc in message.tool_calls:
                result = add(**json.loads(tc.function.arguments))
                messages.append({"role": "tool", "tool_call_id": tc.id, "content": str(result)})
        ep.finish(True)
    assert ep.result is not None and ep.result.used["tool_calls"] == 1
    (tool,) = spans.named("execute_tool")  # not one from the wire besides
    a = tool.attributes or {}
    assert a["gen_ai.tool.call.id"] == tc.id and "budgetmix.tool.timing" not in a
    assert json.loads(str(a["gen_ai.tool.call.arguments"])) == {"a": 1, "b": 2}


def test_a_failed_tool_seen_on_the_wire_explains_itself(
    server: FakeLLMServer, spans: Spans
) -> None:
    controller = BudgetController(Budget(turns=3), tracer_provider=spans.provider)
    client = budgeted(anthropic.Anthropic(api_key="test", base_url=server.root_url), controller)
    server.push(Reply.call("divide", {"a": 1}), Reply.say("cannot"))
    messages: list[Any] = [{"role": "user", "content": "1/0?"}]
    with controller.episode() as ep:
        reply = client.messages.create(
            model="claude-test", max_tokens=64, messages=messages, tools=[DIVIDE]
        )
        (use,) = [b for b in reply.content if b.type == "tool_use"]
        messages.append({"role": "assistant", "content": [b.model_dump() for b in reply.content]})
        result = {"type": "tool_result", "tool_use_id": use.id, "is_error": True}
        messages.append({"role": "user", "content": [{**result, "content": "division by zero"}]})
        client.messages.create(
            model="claude-test", max_tokens=64, messages=messages, tools=[DIVIDE]
        )
        ep.finish(True)
    (tool,) = spans.named("execute_tool")
    assert tool.status.status_code is StatusCode.ERROR
    assert "division by zero" in str(tool.status.description)
    (event,) = [e for e in tool.events if e.name == "exception"]
    assert "division by zero" in str((event.attributes or {})["exception.message"])
    chats = sorted(spans.named("chat"), key=lambda s: s.start_time or 0)
    assert tuple((chats[0].attributes or {})["gen_ai.response.finish_reasons"]) == ("tool_call",)


def test_a_budgeted_client_called_outside_an_episode_warns(
    server: FakeLLMServer, caplog: pytest.LogCaptureFixture
) -> None:
    controller = BudgetController(Budget(turns=3))
    client = budgeted(openai.OpenAI(api_key="test", base_url=server.base_url), controller)
    server.push(Reply.say("a"), Reply.say("b"))
    caplog.set_level(logging.WARNING, logger="budgetmix")
    for _ in range(2):  # unbudgeted: the limit does not apply
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
    warned = [r for r in caplog.records if "outside an episode" in r.getMessage()]
    assert len(warned) == 1 and "budgeted(OpenAI())" in warned[0].getMessage()  # once


async def test_a_sync_only_client_under_an_async_run_warns(
    server: FakeLLMServer, caplog: pytest.LogCaptureFixture
) -> None:
    """LangChain with only a sync ``http_client`` and ``ainvoke``: it builds its own async
    client, so the episode charges nothing; the episode's end says why."""
    framework("langchain_openai")
    from langchain_openai import ChatOpenAI

    controller = BudgetController(Budget(turns=3))
    model = ChatOpenAI(
        model="gpt-4o",
        base_url=server.base_url,
        api_key="test",
        max_retries=0,
        http_client=httpx.Client(transport=BudgetTransport(None, controller)),
    )
    server.push(Reply.say("hi"))
    caplog.set_level(logging.WARNING, logger="budgetmix")
    async with controller.episode(name="lc") as ep:
        await model.ainvoke("hello")
    assert ep.result is not None and ep.result.used["turns"] == 0  # the bypass
    (warning,) = [r for r in caplog.records if "charged no turn" in r.getMessage()]
    assert "BudgetTransport" in warning.getMessage()
    assert "AsyncBudgetTransport" in warning.getMessage()


async def test_a_sync_transport_in_an_async_client_is_refused(server: FakeLLMServer) -> None:
    controller = BudgetController(Budget(turns=3))
    client = openai.AsyncOpenAI(
        api_key="test",
        base_url=server.base_url,
        max_retries=0,
        http_client=httpx.AsyncClient(transport=BudgetTransport(None, controller)),
    )
    async with controller.episode():
        with pytest.raises(ConfigError, match="AsyncBudgetTransport"):
            await client.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "x"}]
            )
    assert server.model_requests() == []  # nothing was sent
