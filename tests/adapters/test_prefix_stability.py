"""The history's bytes do not change from turn to turn (so a provider's prompt cache hits):
every byte of request n before its notice is the start of request n+1, for Chat
Completions, Responses and Anthropic bodies, with a string or a block first message, as
a framework sends them through the HTTP transport or a wrapped client."""

from __future__ import annotations

import itertools
import re
from typing import Any

import httpx
import httpx2
import pytest
from _provider_fakes import ANTHROPIC_MODEL, ANTHROPIC_TOOLS, CHAT_TOOLS, RESPONSES_TOOLS, make_rig
from budgetmix import Budget, BudgetController
from budgetmix.adapters import budgeted
from budgetmix.adapters.http import BudgetTransport
from budgetmix.adapters.testing import Reply
from budgetmix.notice import append_notice
from budgetmix.policies import NotifyEveryTurn

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

FIRST = {
    ("chat", "string"): {"role": "user", "content": "add 1 and 2, twice"},
    ("chat", "blocks"): {"role": "user", "content": [{"type": "text", "text": "add 1 and 2"}]},
    ("responses", "string"): {"role": "user", "content": "add 1 and 2, twice"},
    ("responses", "blocks"): {
        "role": "user",
        "content": [{"type": "input_text", "text": "add 1 and 2"}],
    },
    ("anthropic", "string"): {"role": "user", "content": "add 1 and 2, twice"},
    ("anthropic", "blocks"): {"role": "user", "content": [{"type": "text", "text": "add 1"}]},
}
# where the notice's own message or block opens, just before its text
_NOTICE_OPENS = re.compile(
    rb'(\{"role":\s*"user",\s*"content":\s*(\[\{"type":\s*"(input_)?text",\s*"text":\s*)?"'
    rb'|\{"type":\s*"text",\s*"text":\s*")Budget \(v1\)'
)


def history_end(body: bytes) -> int:
    """Where request ``body``'s history ends: the earliest opening of the notice's own
    message or block (a notice inside an observation is history, sent again)."""
    match = _NOTICE_OPENS.search(body)
    assert match is not None, body[-300:]
    return match.start()


def common_prefix(a: bytes, b: bytes) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def client_for(kind: str, path: str, rig: Any) -> Any:
    if kind == "anthropic":
        if path == "wrapper":
            return budgeted(rig.anthropic(max_retries=0), rig.controller)
        http2 = httpx2.Client(transport=BudgetTransport(rig.net, rig.controller))
        return anthropic.Anthropic(api_key="t", base_url="http://f.test", http_client=http2)
    if path == "wrapper":
        return budgeted(rig.openai(max_retries=0), rig.controller)
    http = httpx.Client(transport=BudgetTransport(rig.net, rig.controller))
    return openai.OpenAI(api_key="t", base_url="http://f.test/v1", http_client=http)


def run_framework(kind: str, client: Any, first: dict[str, Any]) -> None:
    """Three requests of a framework's loop: the history grows by what came back."""
    history: list[Any] = [first]
    for _ in range(3):
        if kind == "chat":
            reply = client.chat.completions.create(
                model="gpt-4o", messages=history, tools=CHAT_TOOLS
            )
            message = reply.choices[0].message
            history.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls or ():
                history.append({"role": "tool", "tool_call_id": call.id, "content": "3"})
        elif kind == "responses":
            response = client.responses.create(model="gpt-4o", input=history, tools=RESPONSES_TOOLS)
            for item in response.output:
                history.append(item.model_dump(exclude_none=True))
                if item.type == "function_call":
                    out = {"type": "function_call_output", "call_id": item.call_id, "output": "3"}
                    history.append(out)
        else:
            msg = client.messages.create(
                model=ANTHROPIC_MODEL, max_tokens=64, messages=history, tools=ANTHROPIC_TOOLS
            )
            blocks = [b.model_dump(exclude_none=True) for b in msg.content]
            history.append({"role": "assistant", "content": blocks})
            results = [
                {"type": "tool_result", "tool_use_id": b["id"], "content": "3"}
                for b in blocks
                if b["type"] == "tool_use"
            ]
            if results:
                history.append({"role": "user", "content": results})


def observation_end(body: bytes) -> int:
    """Where the last notice of ``body`` ends (placement ``"observation"``: every notice
    is history, sent again)."""
    return body.index(b'"', body.rindex(b"Budget (v1)"))


@pytest.mark.parametrize("placement", ["ephemeral", "observation"])
@pytest.mark.parametrize("path", ["transport", "wrapper"])
@pytest.mark.parametrize("first", ["string", "blocks"])
@pytest.mark.parametrize("kind", ["chat", "responses", "anthropic"])
def test_the_history_bytes_of_request_n_start_request_n_plus_1(
    kind: str, first: str, path: str, placement: str
) -> None:
    calls = [Reply.call("add", {"a": 1, "b": 2}), Reply.call("add", {"a": 3, "b": 3})]
    rig = make_rig([*calls, Reply.say("6")])
    rig.controller = BudgetController(
        Budget(turns=5),
        notice=NotifyEveryTurn(placement=placement),  # type: ignore[arg-type]
    )
    with rig.controller.episode():
        run_framework(kind, client_for(kind, path, rig), FIRST[kind, first])
    bodies = [r.body for r in rig.fake.model_requests()]
    assert len(bodies) == 3
    for n, (sent, following) in enumerate(itertools.pairwise(bodies), start=1):
        end = history_end(sent) - 1 if placement == "ephemeral" else observation_end(sent)
        same = common_prefix(sent, following)
        assert same >= end, (  # all of it (ephemeral: up to the joint before the notice)
            f"request {n + 1} differs from request {n} at byte {same}, inside its history "
            f"(which ends at {end}): {sent[max(0, same - 40) : same + 40]!r} / "
            f"{following[max(0, same - 40) : same + 40]!r}"
        )
    if placement == "observation":  # each turn's notice after its observation, kept
        for n, body in enumerate(bodies, start=1):
            assert body.count(b"Budget (v1)") == body.count(b"\\nBudget (v1)") == n


def test_observation_placement_puts_each_notice_after_its_observation_as_training_does() -> None:
    rig = make_rig([Reply.call("add", {"a": 1, "b": 2}), Reply.say("3")])
    rig.controller = BudgetController(
        Budget(turns=4), notice=NotifyEveryTurn(placement="observation")
    )
    with rig.controller.episode():
        run_framework("chat", client_for("chat", "transport", rig), FIRST["chat", "string"])
    first, second, _ = (r.json["messages"] for r in rig.fake.model_requests())
    notice1 = "Budget (v1): turn 1 of 4, 4 turns left including this one."
    notice2 = "Budget (v1): turn 2 of 4, 3 turns left including this one."
    prompt = FIRST["chat", "string"]["content"]
    assert first == [{"role": "user", "content": append_notice(prompt, notice1)}]
    assert second[0] == first[0]  # put back: the framework's history lacks it
    assert second[-1] == {
        "role": "tool",
        "tool_call_id": second[1]["tool_calls"][0]["id"],
        "content": append_notice("3", notice2),
    }
    assert len(second) == 3  # no message of its own
