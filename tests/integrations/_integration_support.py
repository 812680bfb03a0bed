"""What the integration tests share: recorded spans and readers of what the fake server
was sent."""

from __future__ import annotations

import importlib
import itertools
import os
import threading
from collections.abc import Callable
from typing import Any

import pytest
from budgetmix.adapters.testing import FakeLLMServer
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


class Spans:
    """A tracer provider writing to memory, and what it recorded."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def finished(self) -> tuple[ReadableSpan, ...]:
        return tuple(self.exporter.get_finished_spans())

    def named(self, prefix: str) -> list[ReadableSpan]:
        return [s for s in self.finished() if s.name.startswith(prefix)]


NOTICE = b"Budget (v1)"


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def notices(server: FakeLLMServer) -> list[str]:
    """The notice each model request carried (its last message's text)."""
    out = []
    for request in server.model_requests():
        body = request.json
        items = body.get("messages") if "messages" in body else body.get("input")
        last = items[-1]
        text = _text(last.get("content"))
        if isinstance(last.get("content"), list) and last.get("role") == "user":
            text = _text(last["content"][-1:])  # Anthropic: the block after the results
        out.append(text)
    return out


def observation_before_notice(body: dict[str, Any]) -> str:
    """What comes right before the notice: ``"tool"`` when it follows the latest tool
    result (chat ``tool`` message, Responses ``function_call_output``, Anthropic
    ``tool_result`` block), ``"user"`` when it follows the task, else what it follows."""
    if "input" in body:  # Responses
        items = body["input"]
        before = items[-2]
        if before.get("type") == "function_call_output":
            return "tool"
        return str(before.get("role", before.get("type")))
    messages = body["messages"]
    last = messages[-1]
    if isinstance(last.get("content"), list) and len(last["content"]) > 1:  # Anthropic
        block = last["content"][-2]
        return "tool" if block.get("type") == "tool_result" else str(block.get("type"))
    return str(messages[-2].get("role"))


def assert_prefix_stable(server: FakeLLMServer) -> None:
    """Every model request's bytes up to its notice are the first bytes of the next
    request: the history is sent byte for byte as before, so prompt caches hit."""
    bodies = [r.body for r in server.model_requests()]
    assert len(bodies) >= 2, "needs two requests to compare"
    for n, (this, following) in enumerate(itertools.pairwise(bodies)):
        start = _notice_start(this) - 1  # before the "," that joins it to the history too
        assert this[:start] == following[:start], (
            f"request {n + 2} differs from request {n + 1} within its first {start} bytes "
            f"(first difference at byte {_first_difference(this, following)})"
        )


def _notice_start(body: bytes) -> int:
    """Where the notice begins in a request's bytes: its block, or the message holding it
    when it is that message's only content block."""
    start = body.rfind(b"{", 0, body.index(NOTICE))
    if body[start - 1 : start] == b"[":  # the first block of its message: the message
        start = body.rfind(b"{", 0, start)
    return start


def _first_difference(a: bytes, b: bytes) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), len(a))


def in_chain(exc: BaseException | None, kind: type[BaseException]) -> bool:
    """Whether ``kind`` is ``exc`` or in its ``__cause__``/``__context__`` chain."""
    seen: set[int] = set()
    stack = [exc]
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        if isinstance(e, kind):
            return True
        seen.add(id(e))
        stack += [e.__cause__, e.__context__]
    return False


def framework(module: str) -> Any:
    """Import a framework the group tests: skipped where it is not installed, but in CI
    (``CI`` set; the set-up script installs the ``frameworks`` extra) a missing one fails
    the run instead of passing it silently."""
    if os.environ.get("CI"):
        return importlib.import_module(module)
    return pytest.importorskip(module)


def side_by_side(one_run: Callable[[int], None], budgets: tuple[int, ...] = (2, 3)) -> None:
    """Run ``one_run(budget)`` for every budget at once, one thread each, and wait (60 s
    per thread): the concurrent-runs check of every framework test."""
    threads = [threading.Thread(target=one_run, args=(b,)) for b in budgets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
