"""Issue 30, item 6: absurd usage from a server is never charged as a silent 0.

NaN, infinities, negative, 400-digit, string, boolean and fractional token counts,
whole and streamed, through the transport and the wrapper: each is recorded as a
``budgetmix.usage_invalid`` event with a warning and charged by the documented estimate
(:func:`budgetmix.accounting.estimate_tokens`), so a token budget still binds. Before
issue 30 each was charged 0 and the budget never bound (the tests failed).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import pytest
from _provider_fakes import chat_request, make_rig, transport
from budgetmix import BudgetExhausted
from budgetmix.accounting import estimate_tokens
from budgetmix.adapters import budgeted
from budgetmix.adapters.testing import Reply

openai = pytest.importorskip("openai")

# As the JSON text a server sends (NaN and Infinity are what Python's json accepts).
ABSURD = {
    "nan": "NaN",
    "inf": "Infinity",
    "-inf": "-Infinity",
    "negative": "-1000000",
    "huge": "1" + "0" * 400,
    "string": '"12"',
    "bool": "true",
    "fraction": "1.5",
}
TEXT = "x" * 400  # 100 tokens by the estimate


def whole(value: str) -> bytes:
    return (
        '{"id":"c","object":"chat.completion","created":0,"model":"gpt-4o","choices":[{"index":0,'
        '"finish_reason":"stop","message":{"role":"assistant","content":"' + TEXT + '"}}],'
        '"usage":{"prompt_tokens":' + value + ',"completion_tokens":' + value + "}}"
    ).encode()


def streamed(value: str) -> bytes:
    head = {"model": "gpt-4o", "choices": [{"index": 0, "delta": {"content": TEXT}}]}
    tail = '{"model":"gpt-4o","choices":[],"usage":{"prompt_tokens":' + value
    tail += ',"completion_tokens":' + value + "}}"
    return b"data: " + json.dumps(head).encode() + b"\n\ndata: " + tail.encode() + b"\n\n"


def reply(value: str, stream: bool) -> Reply:
    if stream:
        return Reply(body=streamed(value), headers={"content-type": "text/event-stream"})
    return Reply(body=whole(value))


def call(client: Any, stream: bool) -> None:
    result = client.chat.completions.create(**chat_request(stream=stream))
    if stream:
        for _ in result:
            pass


def via_transport(rig: Any) -> Any:
    http = httpx.Client(transport=transport(rig))
    return openai.OpenAI(api_key="t", base_url="http://fake.test/v1", http_client=http)


def via_wrapper(rig: Any) -> Any:
    return budgeted(rig.openai(max_retries=0), rig.controller)


PATHS = {"transport": via_transport, "wrapper": via_wrapper}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("name", sorted(ABSURD))
def test_absurd_usage_is_said_and_charged_by_estimate(
    name: str, path: str, stream: bool, caplog: pytest.LogCaptureFixture
) -> None:
    rig = make_rig([reply(ABSURD[name], stream)])
    client = PATHS[path](rig)
    with caplog.at_level(logging.WARNING), rig.controller.episode() as ep:
        call(client, stream)
        used = dict(ep.state.used)
    assert used["output_tokens"] == estimate_tokens(len(TEXT)) == 100
    assert used["input_tokens"] >= estimate_tokens(len(json.dumps(chat_request())))
    events = [e for s in rig.spans() for e in s.events if e.name == "budgetmix.usage_invalid"]
    assert len(events) == 1
    assert "prompt_tokens=" in str(events[0].attributes["budgetmix.usage.invalid"])
    assert any("usage is no count" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("path", sorted(PATHS))
def test_a_token_budget_binds_against_a_server_reporting_nan(path: str) -> None:
    rig = make_rig([reply("NaN", True)] * 5, turns=5, output_tokens=250)
    client = PATHS[path](rig)
    with rig.controller.episode() as ep:
        with pytest.raises(BudgetExhausted) as info:
            for _ in range(5):
                call(client, True)
        assert info.value.dimension == "output_tokens"
        assert ep.state.used["turns"] == 3  # 100 + 100 + 100 > 250: the fourth is refused


def test_valid_usage_is_charged_as_sent_without_an_event() -> None:
    rig = make_rig([reply("7", False)])
    with rig.controller.episode() as ep:
        call(via_transport(rig), False)
        assert ep.state.used["input_tokens"] == 7 and ep.state.used["output_tokens"] == 7
    assert not [e for s in rig.spans() for e in s.events if e.name == "budgetmix.usage_invalid"]
