"""LiteLLM, unmodified, under the budget: ``litellm.completion`` / ``acompletion`` with
the OpenAI client it is given (``client=``) budgeted in one line, either
``budgeted(openai.OpenAI(...), controller)`` (LiteLLM sends through the client's
low-level ``post``) or an ``openai.OpenAI`` whose ``http_client`` has the transport."""

from __future__ import annotations

import json
import os
from typing import Any

import httpx
import pytest
from _integration_support import (
    Spans,
    assert_prefix_stable,
    framework,
    in_chain,
    notices,
    side_by_side,
)
from budgetmix import Budget, BudgetController, BudgetExhausted, EpisodeStatus
from budgetmix.adapters import budgeted
from budgetmix.adapters.http import AsyncBudgetTransport, BudgetTransport
from budgetmix.adapters.testing import FakeLLMServer, Reply

# LiteLLM fetches a model price map from the network at import unless told not to
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
openai = framework("openai")
litellm = framework("litellm")
litellm.suppress_debug_info = True  # no "Give Feedback" banner on every error

WIRINGS = ["budgeted", "transport"]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    }
]


def client_for(server: FakeLLMServer, controller: BudgetController, wiring: str) -> Any:
    if wiring == "budgeted":
        return budgeted(openai.OpenAI(api_key="test", base_url=server.base_url), controller)
    return openai.OpenAI(
        api_key="test",
        base_url=server.base_url,
        http_client=httpx.Client(transport=BudgetTransport(None, controller)),
        max_retries=0,
    )


def agent_loop(client: Any, turns: int, *, stream: bool = False) -> list[Any]:
    """A plain tool loop over litellm.completion, as an application writes it."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "what is 1+2?"}]
    replies = []
    for _ in range(turns):
        reply = litellm.completion(
            model="openai/gpt-4o",
            messages=messages,
            tools=TOOLS,
            client=client,
            stream=stream,
            max_retries=0,
        )
        if stream:
            reply = litellm.stream_chunk_builder(list(reply), messages=messages)
        message = reply.choices[0].message
        replies.append(message)
        if not message.tool_calls:
            break
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            args = json.loads(call.function.arguments)
            messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": str(args["a"] + args["b"])}
            )
    return replies


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("wiring", WIRINGS)
def test_completion_is_budgeted_noticed_and_traced(
    server: FakeLLMServer, spans: Spans, wiring: str, stream: bool
) -> None:
    server.push(Reply.call("add", {"a": 1, "b": 2}), Reply.say("3"))
    controller = BudgetController(Budget(turns=3), tracer_provider=spans.provider)
    client = client_for(server, controller, wiring)
    with controller.episode() as ep:
        replies = agent_loop(client, turns=3, stream=stream)
    assert replies[-1].content == "3"
    assert ep.result is not None and ep.result.used["turns"] == 2
    assert notices(server) == [
        "Budget (v1): turn 1 of 3, 3 turns left including this one.",
        "Budget (v1): turn 2 of 3, 2 turns left including this one.",
    ]
    assert [r.json["messages"][-2]["role"] for r in server.model_requests()] == ["user", "tool"]
    assert all(r.json.get("stream", False) is stream for r in server.model_requests())
    assert_prefix_stable(server)
    (tool_span,) = spans.named("execute_tool")
    assert tool_span.attributes["gen_ai.tool.name"] == "add"


@pytest.mark.parametrize("wiring", WIRINGS)
def test_the_limit_holds_and_the_episode_ends_on_budget(server: FakeLLMServer, wiring: str) -> None:
    server.default = Reply.call("add", {"a": 1, "b": 2})
    controller = BudgetController(Budget(turns=2))
    client = client_for(server, controller, wiring)
    with pytest.raises(litellm.InternalServerError) as info:  # noqa: SIM117 - its wrapper
        with controller.episode() as ep:
            agent_loop(client, turns=10)
    assert in_chain(info.value, BudgetExhausted), repr(info.value)
    assert len(server.model_requests()) == 2  # 50 before issue 16 (item 1)
    assert ep.result is not None and ep.result.status is EpisodeStatus.BUDGET_EXHAUSTED
    assert ep.result.stop_reason == "turns"


async def test_acompletion_over_the_async_transport(server: FakeLLMServer) -> None:
    server.push(Reply.say("3"))
    controller = BudgetController(Budget(turns=1))
    client = openai.AsyncOpenAI(
        api_key="test",
        base_url=server.base_url,
        http_client=httpx.AsyncClient(transport=AsyncBudgetTransport(None, controller)),
        max_retries=0,
    )
    messages = [{"role": "user", "content": "what is 1+2?"}]
    async with controller.episode() as ep:
        reply = await litellm.acompletion(model="openai/gpt-4o", messages=messages, client=client)
        with pytest.raises(litellm.InternalServerError) as info:
            await litellm.acompletion(model="openai/gpt-4o", messages=messages, client=client)
    assert reply.choices[0].message.content == "3"
    assert in_chain(info.value, BudgetExhausted)
    assert len(server.model_requests()) == 1
    assert ep.result is not None and ep.result.used["turns"] == 1


@pytest.mark.parametrize("wiring", WIRINGS)
def test_concurrent_runs_in_threads_keep_separate_budgets(
    server: FakeLLMServer, wiring: str
) -> None:
    server.default = Reply.call("add", {"a": 1, "b": 2})
    controller = BudgetController(Budget(turns=2))
    client = client_for(server, controller, wiring)  # one client, two same-prompt runs
    results: dict[int, Any] = {}

    def one_run(turns: int) -> None:
        with pytest.raises(litellm.InternalServerError):  # noqa: SIM117 - its wrapper
            with controller.episode(budget=Budget(turns=turns)) as ep:
                agent_loop(client, turns=10)
        results[turns] = ep.result

    side_by_side(one_run)
    assert {t: (r.used["turns"], r.status) for t, r in results.items()} == {
        2: (2, EpisodeStatus.BUDGET_EXHAUSTED),
        3: (3, EpisodeStatus.BUDGET_EXHAUSTED),
    }
    assert len(server.model_requests()) == 5
