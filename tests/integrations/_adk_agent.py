"""An unmodified Google ADK agent whose model reaches the gateway through ``base_url``
alone (ADK's ``LiteLlm`` model with ``api_base``); run with ``.venv-adk/bin/python`` by
test_adk_gateway.py (google-adk pins OpenTelemetry and mcp below budgetmix's extras).
Argument: the gateway's URL. Prints one JSON line: the tool's calls, the agent's final
text or the exception the run raised, and every non-loopback address the process tried
to reach (each one refused)."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from _loopback import REFUSED  # first: the guard is on before any framework import
from google.adk.agents import LlmAgent
from google.adk.models.lite_llm import LiteLlm
from google.adk.runners import InMemoryRunner
from google.genai import types

CALLS: list[str] = []


def lookup(query: str) -> str:
    """Look a fact up."""
    CALLS.append(query)
    return f"no result for {query}"


async def main(url: str) -> None:
    model = LiteLlm(
        model="openai/gpt-4o",
        api_base=url + "/v1",  # the one line
        api_key="sk-adk",
        extra_headers={"x-budgetmix-conversation": "adk-run"},
    )
    agent = LlmAgent(name="researcher", model=model, instruction="Answer the question.",
                     tools=[lookup])  # fmt: skip
    runner = InMemoryRunner(agent=agent, app_name="budgetmix-test")
    session = await runner.session_service.create_session(app_name="budgetmix-test",
                                                          user_id="user")  # fmt: skip
    question = types.Content(role="user", parts=[types.Part(text="What is the capital of Peru?")])
    out: dict[str, Any] = {}
    texts: list[str] = []
    try:
        async for event in runner.run_async(user_id="user", session_id=session.id,
                                            new_message=question):  # fmt: skip
            if event.is_final_response() and event.content and event.content.parts:
                texts += [p.text for p in event.content.parts if p.text]
        out["output"] = "".join(texts)
    except Exception as exc:  # what the agent's caller sees
        out["error"] = f"{type(exc).__name__}: {exc}"
    out.update(calls=CALLS, refused=REFUSED)
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
