"""Budgets for a framework you don't control: the OpenAI Agents SDK, unchanged, with
budgetmix's transport in its HTTP client.

    python examples/any_framework_via_httpx.py

With ``OPENAI_API_KEY`` set it calls OpenAI (model ``$BUDGETMIX_MODEL``, default
``gpt-4o-mini``). To use a vLLM or Ollama server, set ``OPENAI_BASE_URL``
(``http://localhost:8000/v1`` / ``http://localhost:11434/v1``), any key, and the
served model's name in ``BUDGETMIX_MODEL``. Without a key it runs offline
against budgetmix's scripted fake server on 127.0.0.1.

``AsyncBudgetTransport`` charges each model request a turn before it leaves,
injects the notice into the JSON body, reads usage from the (streamed)
response, and retries transient failures itself (hence ``max_retries=0``).
The Agents SDK's own ``max_turns`` would raise; here the budget ends the run
with a final answer the framework understands (``on_exhausted="respond"``).
"""

from __future__ import annotations

import asyncio
import os

import httpx
import openai
from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from budgetmix import Budget, BudgetController, EpisodeResult
from budgetmix.adapters.http import AsyncBudgetTransport
from budgetmix.adapters.testing import FakeLLMServer, Reply


@function_tool
def get_temperature(city: str) -> str:
    """Current temperature of a city in degrees Celsius."""
    return {"paris": "18", "oslo": "4"}.get(city.lower(), "unknown")


def connect(
    transport: AsyncBudgetTransport,
) -> tuple[openai.AsyncOpenAI, str, FakeLLMServer | None]:
    """A real client when a key is configured, else one on the local fake server."""
    model = os.environ.get("BUDGETMIX_MODEL", "gpt-4o-mini")
    http_client = httpx.AsyncClient(transport=transport)
    if os.environ.get("OPENAI_API_KEY"):
        return openai.AsyncOpenAI(http_client=http_client, max_retries=0), model, None
    print("OPENAI_API_KEY is not set: using the scripted fake server on 127.0.0.1.\n")
    set_tracing_disabled(True)  # no key: nowhere to send the Agents SDK's own traces
    server = FakeLLMServer(
        [
            Reply.call("get_temperature", {"city": "Paris"}),
            Reply.call("get_temperature", {"city": "Oslo"}),
            Reply.call("get_temperature", {"city": "Rome"}),  # the budget stops this one
        ]
    )
    server.start()
    client = openai.AsyncOpenAI(
        base_url=server.base_url, api_key="fake", http_client=http_client, max_retries=0
    )
    return client, model, server


async def run() -> EpisodeResult:
    controller = BudgetController(Budget(turns=2), name="weather")
    transport = AsyncBudgetTransport(None, controller, on_exhausted="respond")
    client, model, server = connect(transport)
    agent = Agent(
        name="weather",
        instructions="Answer with the temperatures of the cities asked about.",
        tools=[get_temperature],
        model=OpenAIChatCompletionsModel(model=model, openai_client=client),
    )
    try:
        # the chat session this run serves: a backend groups its traces by it
        async with controller.episode(conversation_id="httpx-agent-1") as ep:
            out = await Runner.run(agent, "Compare Paris, Oslo and Rome.", max_turns=10)
            print(f"agent's final output: {out.final_output}")
    finally:
        if server is not None:
            server.stop()
    result = ep.result
    assert result is not None
    print(f"status: {result.status} ({result.stop_reason}), turns: {result.turns_used} of 2")
    return result


def main() -> EpisodeResult:
    return asyncio.run(run())


if __name__ == "__main__":
    main()
