"""Shared doubles for the provider adapter tests: real SDK clients over an in-process
fake LLM (``FakeLLMServer.transport()``), a request-counting transport, tool specs in
each wire format, and in-memory OpenTelemetry."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import httpx2
from budgetmix import Budget, BudgetController
from budgetmix.adapters.testing import FakeLLMServer
from budgetmix.retry import RetryPolicy
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

ADD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
    "additionalProperties": False,
}
CHAT_TOOLS = [{"type": "function", "function": {"name": "add", "parameters": ADD_SCHEMA}}]
RESPONSES_TOOLS = [{"type": "function", "name": "add", "parameters": ADD_SCHEMA}]
ANTHROPIC_TOOLS = [{"name": "add", "description": "a+b", "input_schema": ADD_SCHEMA}]
ANTHROPIC_MODEL = "claude-sonnet-4-6"


class CountingTransport:
    """Counts what reaches "the network" (the inner transport); httpx and httpx2, sync
    and async."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.count = 0

    def handle_request(self, request: Any) -> Any:
        self.count += 1
        return self.inner.handle_request(request)

    async def handle_async_request(self, request: Any) -> Any:
        self.count += 1
        return await self.inner.handle_async_request(request)

    def close(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


@dataclass
class Rig:
    """A fake LLM, the counting transport in front of it, and a controller with spans."""

    fake: FakeLLMServer
    net: CountingTransport
    controller: BudgetController
    exporter: InMemorySpanExporter
    sleeps: list[float] = field(default_factory=list)

    def spans(self, prefix: str = "") -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if s.name.startswith(prefix)]

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)

    def asleep(self) -> Callable[[float], Awaitable[None]]:
        async def sleep(seconds: float) -> None:
            self.sleeps.append(seconds)

        return sleep

    def openai(self, *, is_async: bool = False, **kw: Any) -> Any:
        import openai

        if is_async:
            return openai.AsyncOpenAI(
                api_key="test",
                base_url="http://fake.test/v1",
                http_client=httpx.AsyncClient(transport=self.net),  # type: ignore[arg-type]
                **kw,
            )
        return openai.OpenAI(
            api_key="test",
            base_url="http://fake.test/v1",
            http_client=httpx.Client(transport=self.net),  # type: ignore[arg-type]
            **kw,
        )

    def anthropic(self, *, is_async: bool = False, **kw: Any) -> Any:
        import anthropic

        if is_async:
            return anthropic.AsyncAnthropic(
                api_key="test",
                base_url="http://fake.test",
                http_client=httpx2.AsyncClient(transport=self.net),
                **kw,
            )
        return anthropic.Anthropic(
            api_key="test",
            base_url="http://fake.test",
            http_client=httpx2.Client(transport=self.net),
            **kw,
        )


def make_rig(
    replies: Any = (),
    *,
    turns: int = 5,
    exhaustion: Any = "end",
    retry: RetryPolicy | None = None,
    **budget: Any,
) -> Rig:
    fake = FakeLLMServer(replies)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    controller = BudgetController(
        Budget(turns=turns, **budget),
        exhaustion=exhaustion,
        retry=retry or RetryPolicy(max_attempts=3, jitter=0.0),
        tracer_provider=provider,
    )
    return Rig(fake, CountingTransport(fake.transport()), controller, exporter)


def last_message(rig: Rig) -> Any:
    body = rig.fake.requests[-1].json
    if "input" in body:
        return body["input"][-1]
    return body["messages"][-1]


def kinds(ep: Any) -> list[str]:
    """The kinds of ``ep``'s mistakes, in order."""
    return [str(m.kind) for m in ep.mistakes]


def transport(rig: Rig, **kw: Any) -> Any:
    """A sync :class:`~budgetmix.adapters.http.BudgetTransport` in front of ``rig``'s net."""
    from budgetmix.adapters.http import BudgetTransport

    return BudgetTransport(rig.net, rig.controller, sleep=rig.sleep, **kw)


def chat_request(**extra: Any) -> dict[str, Any]:
    """A one-message Chat Completions request body."""
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], **extra}
