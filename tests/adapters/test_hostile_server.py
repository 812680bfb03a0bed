"""Issue 30, item 7: a hostile server on the loopback, driven by hypothesis.

Each example sends one response, whole or streamed, that is malformed, truncated,
trickling, hanging, oversized, nested too deep, bad UTF-8 or reports absurd usage (or
a good one), through the transport (``BudgetTransport`` under the OpenAI SDK) or the
wrapper (``budgeted(client)``). Every outcome must be defined: a result, or an error
of the budgetmix tree (:class:`~budgetmix.BudgetmixError`); no call may go on past the
episode's wall budget plus one second (a trickle or a hang would take 45 s); and the
ledger must stay whole (a turn charged at most once, counts finite). Bounded: 40
examples, each under about ``WALL`` seconds, in CI well under two minutes.
"""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any

import httpx
import pytest
from _hostile_server import Script, hostile_server, trickle
from budgetmix import Budget, BudgetController, BudgetmixError
from budgetmix.adapters import budgeted
from budgetmix.adapters.http import BudgetTransport
from budgetmix.retry import RetryPolicy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.timeout(110)

WALL = 1.5
CHUNK = {"model": "gpt-4o", "choices": [{"index": 0, "delta": {"content": "hi"}}]}
MESSAGE = {"role": "assistant", "content": "hi"}


def whole_body(usage: Any) -> bytes:
    head = (
        '{"id":"c","object":"chat.completion","created":0,"model":"gpt-4o","choices":'
        '[{"index":0,"finish_reason":"stop","message":' + json.dumps(MESSAGE) + "}]"
    )
    return (head + ',"usage":{"prompt_tokens":' + usage + ',"completion_tokens":2}}').encode()


def stream_body(usage: Any) -> bytes:
    event = b"data: " + json.dumps(CHUNK).encode() + b"\n\n"
    tail = '{"model":"gpt-4o","choices":[],"usage":{"prompt_tokens":' + usage
    tail += ',"completion_tokens":2}}'
    return event * 3 + b"data: " + tail.encode() + b"\n\ndata: [DONE]\n\n"


USAGES = st.sampled_from(["3", "NaN", "-Infinity", "-1000000", "1" + "0" * 400, '"12"', "true"])
ATTACKS = st.sampled_from(
    ["good", "malformed", "truncated", "trickle", "hang", "oversized", "deep", "bad_utf8"]
)


@st.composite
def scripts(draw: st.DrawFn, stream: bool) -> Script:
    attack = draw(ATTACKS)
    body = (stream_body if stream else whole_body)(draw(USAGES))
    ctype = "text/event-stream" if stream else "application/json"
    cut = draw(st.integers(1, max(1, len(body) - 1)))
    if attack == "malformed":
        body = body[:cut] + draw(st.sampled_from([b"{not json", b"\n\ndata: {]\n\n", b"\x00"]))
    elif attack == "deep":
        body = (b"data: " if stream else b"") + b"[" * 50_000 + b"]" * 50_000 + b"\n\n"
    elif attack == "bad_utf8":
        body = body[:cut] + b"\xff\xfe" + body[cut:]
    elif attack == "oversized":
        pad = b"data: " + json.dumps({"pad": "x" * 8000}).encode() + b"\n\n"
        body = pad + body if stream else body[:-1] + b',"pad":"' + b"x" * 9000 + b'"}'
    if attack == "trickle":  # 45 s at this pace
        return trickle(body[:90], 0.5, content_type=ctype, length=len(body))
    if attack == "hang":
        return Script([body[:cut]], content_type=ctype, length=len(body), hang=True)
    if attack == "truncated":
        length = draw(st.sampled_from([len(body), "chunked", None]))
        return Script([body[:cut]], content_type=ctype, length=length, cut=True)
    pieces = [body[i : i + 700] for i in range(0, len(body), 700)]
    return Script(pieces, content_type=ctype, length=draw(st.sampled_from(["auto", "chunked"])))


def client_for(path: str, url: str, ctl: BudgetController) -> Any:
    if path == "transport":
        transport = BudgetTransport(None, ctl, max_event_bytes=4096, max_body_bytes=1 << 20)
        http = httpx.Client(transport=transport, timeout=3.0)
        return openai.OpenAI(api_key="t", base_url=url + "/v1", http_client=http, max_retries=0)
    raw = openai.OpenAI(api_key="t", base_url=url + "/v1", timeout=3.0, max_retries=0)
    return budgeted(raw, ctl)


def call(client: Any, stream: bool) -> None:
    result = client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=stream
    )
    if stream:
        for _ in result:
            pass


@pytest.fixture(scope="module")
def server() -> Any:
    with hostile_server() as running:
        yield running


@pytest.mark.slow
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_every_hostile_response_ends_defined_and_in_time(server: Any, data: Any) -> None:
    path = data.draw(st.sampled_from(["transport", "wrapper"]), label="path")
    stream = data.draw(st.booleans(), label="stream")
    server.script = data.draw(scripts(stream), label="script")
    ctl = BudgetController(
        Budget(turns=3, wall_seconds=WALL), retry=RetryPolicy(max_attempts=2, jitter=0.0)
    )
    client = client_for(path, server.url, ctl)
    with ctl.episode() as ep:
        bound = time.monotonic() + (ep.ledger.wall_left() or 0.0)
        with contextlib.suppress(BudgetmixError):  # ResponseFormatError, ProviderError, ...
            call(client, stream)
        late = time.monotonic() - bound
        used = dict(ep.state.used)
    assert late < 1.0, f"the call went on {late:.2f} s past the wall budget"
    assert used["turns"] <= 1
    assert all(v >= 0 and v == v and v != float("inf") for v in used.values()), used
