"""Issue 30, item 4: every read of a response body is bounded by the episode.

A real loopback server trickles a body one byte every half second (45 s for the whole
of it), under ``Budget(wall_seconds=4)`` and a 3 s client timeout that the trickle
defeats. What is measured is the cut-off itself: how long after the bound (the wall
budget's end, or the idle / total read deadline) the read ended; it must be under a
second, whatever the machine's speed. Before issue 30 the reads went on for 45 s.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest
from _hostile_server import Script, hostile_server, trickle
from budgetmix import Budget, BudgetController, BudgetExhausted, ProviderError
from budgetmix.adapters import budgeted
from budgetmix.adapters.http import AsyncBudgetTransport, BudgetTransport
from budgetmix.retry import RetryPolicy

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.timeout(60)

WALL = 4.0
CHAT = {
    "id": "c",
    "object": "chat.completion",
    "created": 0,
    "model": "gpt-4o",
    "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant"}}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}
WHOLE = json.dumps(CHAT).encode()  # ~190 bytes: over 90 s at 2 bytes a second
CHUNK = {"model": "gpt-4o", "choices": [{"index": 0, "delta": {"content": "hello"}}]}
STREAM = b"".join(b"data: " + json.dumps(CHUNK).encode() + b"\n\n" for _ in range(3))
REQUEST = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}


def controller(wall: float | None = WALL) -> BudgetController:
    return BudgetController(
        Budget(turns=5, wall_seconds=wall), retry=RetryPolicy(max_attempts=1, jitter=0.0)
    )


def via_transport(url: str, ctl: BudgetController, **kw: Any) -> Any:
    http = httpx.Client(transport=BudgetTransport(None, ctl, **kw), timeout=3.0)
    return openai.OpenAI(api_key="t", base_url=url + "/v1", http_client=http, max_retries=0)


def via_wrapper(url: str, ctl: BudgetController) -> Any:
    raw = openai.OpenAI(api_key="t", base_url=url + "/v1", timeout=3.0, max_retries=0)
    return budgeted(raw, ctl)


def call(client: Any, stream: bool) -> None:
    result = client.chat.completions.create(**REQUEST, stream=stream)
    if stream:
        for _ in result:
            pass


def late_by(bound: float) -> float:
    """Seconds past ``bound`` (a monotonic time) now."""
    return time.monotonic() - bound


def body(stream: bool) -> Script:
    if stream:
        return trickle(STREAM, 0.5, content_type="text/event-stream", length=None)
    return trickle(WHOLE, 0.5)


PATHS = {"transport": via_transport, "wrapper": via_wrapper}
CASES = [("transport", False), ("transport", True), ("wrapper", False), ("wrapper", True)]


@pytest.mark.slow
@pytest.mark.parametrize(("path", "stream"), CASES, ids=["transport", "sse", "wrapper", "w-sse"])
def test_a_trickle_is_cut_off_when_the_wall_budget_runs_out(path: str, stream: bool) -> None:
    ctl = controller()
    with hostile_server() as server, ctl.episode() as ep:
        server.script = body(stream)
        bound = time.monotonic() + (ep.ledger.wall_left() or 0.0)
        with pytest.raises(BudgetExhausted) as info:
            call(PATHS[path](server.url, ctl), stream)
        late = late_by(bound)
        assert ep.state.used["turns"] == 1  # answered in part: the turn stays charged
    assert info.value.dimension == "wall_seconds"
    assert -0.5 < late < 1.0, f"cut off {late:.2f} s after the wall budget ran out"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "sse"])
def test_an_idle_body_is_cut_off_at_the_idle_deadline(stream: bool) -> None:
    ctl = controller(wall=None)
    pieces = [STREAM[:40]] if stream else [WHOLE[:40]]
    ctype = "text/event-stream" if stream else "application/json"
    with hostile_server() as server, ctl.episode() as ep:
        server.script = Script(pieces, content_type=ctype, length=len(WHOLE), hang=True)
        http = httpx.Client(transport=BudgetTransport(None, ctl, read_idle_seconds=1.0), timeout=30)
        client = openai.OpenAI(api_key="t", base_url=server.url + "/v1", http_client=http)
        start = time.monotonic()
        with pytest.raises(ProviderError, match="read_idle_seconds=1") as info:
            call(client.with_options(max_retries=0), stream)
        late = late_by(start + 1.0)
        assert [str(m.kind) for m in ep.mistakes] == ["provider_error"]
    assert not info.value.retryable
    assert late < 1.0 + 0.5, f"cut off {late:.2f} s after the idle deadline"  # + the headers


@pytest.mark.slow
def test_a_trickle_is_cut_off_at_the_total_read_deadline() -> None:
    ctl = controller(wall=None)
    with hostile_server() as server, ctl.episode():
        server.script = trickle(WHOLE, 0.2)
        transport = BudgetTransport(None, ctl, read_total_seconds=2.0)
        client = openai.OpenAI(
            api_key="t",
            base_url=server.url + "/v1",
            http_client=httpx.Client(transport=transport, timeout=3.0),
            max_retries=0,
        )
        start = time.monotonic()
        with pytest.raises(ProviderError, match="read_total_seconds"):
            call(client, False)
        late = late_by(start + 2.0)
    assert late < 1.0, f"cut off {late:.2f} s after the total read deadline"


@pytest.mark.slow
def test_the_async_transport_cuts_a_trickle_off_at_the_wall() -> None:
    ctl = controller()

    async def run(url: str) -> float:
        http = httpx.AsyncClient(transport=AsyncBudgetTransport(None, ctl), timeout=3.0)
        client = openai.AsyncOpenAI(api_key="t", base_url=url + "/v1", http_client=http)
        async with http:
            with ctl.episode() as ep:
                bound = time.monotonic() + (ep.ledger.wall_left() or 0.0)
                with pytest.raises(BudgetExhausted):
                    result = await client.with_options(max_retries=0).chat.completions.create(
                        **REQUEST, stream=True
                    )
                    async for _ in result:
                        pass
                return late_by(bound)

    with hostile_server() as server:
        server.script = body(True)
        late = asyncio.run(run(server.url))
    assert -0.5 < late < 1.0, f"cut off {late:.2f} s after the wall budget ran out"


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), 1e300, True, "5"])
def test_read_deadlines_are_validated(bad: Any) -> None:
    from budgetmix import ConfigError

    with pytest.raises(ConfigError, match="read_idle_seconds"):
        BudgetTransport(None, None, read_idle_seconds=bad)
    with pytest.raises(ConfigError, match="read_total_seconds"):
        BudgetTransport(None, None, read_total_seconds=bad)


def test_a_prompt_body_is_read_as_before() -> None:
    ctl = controller()
    with hostile_server() as server, ctl.episode() as ep:
        server.script = Script([WHOLE])
        call(via_transport(server.url, ctl), False)
        server.script = Script([STREAM, b"data: [DONE]\n\n"], content_type="text/event-stream")
        call(via_transport(server.url, ctl), True)
        assert ep.state.used["turns"] == 2 and not ep.mistakes


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "sse"])
def test_the_async_wrapper_cuts_a_trickle_off_at_the_wall(stream: bool) -> None:
    ctl = controller()

    async def run(url: str) -> float:
        raw = openai.AsyncOpenAI(api_key="t", base_url=url + "/v1", timeout=3.0, max_retries=0)
        client = budgeted(raw, ctl)
        with ctl.episode() as ep:
            bound = time.monotonic() + (ep.ledger.wall_left() or 0.0)
            with pytest.raises(BudgetExhausted):
                result = await client.chat.completions.create(**REQUEST, stream=stream)
                if stream:
                    async for _ in result:
                        pass
            return late_by(bound)

    with hostile_server() as server:
        server.script = body(stream)
        late = asyncio.run(run(server.url))
    assert -0.5 < late < 1.0, f"cut off {late:.2f} s after the wall budget ran out"
