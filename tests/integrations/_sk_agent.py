"""An unmodified Semantic Kernel agent whose model reaches the gateway through
``base_url`` alone (``OpenAIChatCompletion`` over a plain ``AsyncOpenAI`` client); run
with ``.venv-sk/bin/python`` by test_semantic_kernel_gateway.py (semantic-kernel does not
install beside budgetmix's extras). Argument: the gateway's URL. Prints one JSON line: the
tool's calls, the agent's answer or the exception it raised (with its causes), and every
non-loopback address the process tried to reach (each one refused)."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Annotated, Any

from _loopback import REFUSED  # first: the guard is on before any framework import
from openai import AsyncOpenAI
from semantic_kernel.agents import ChatCompletionAgent
from semantic_kernel.connectors.ai.open_ai import OpenAIChatCompletion
from semantic_kernel.functions import kernel_function

CALLS: list[str] = []


class Facts:
    @kernel_function(name="lookup", description="Look a fact up.")
    def lookup(self, query: Annotated[str, "what to look up"]) -> str:
        CALLS.append(query)
        return f"no result for {query}"


def _chain(exc: BaseException) -> list[str]:
    out: list[str] = []
    seen: BaseException | None = exc
    while seen is not None and len(out) < 5:
        out.append(f"{type(seen).__module__}.{type(seen).__name__}: {seen}")
        seen = seen.__cause__ or seen.__context__
    return out


async def main(url: str) -> None:
    client = AsyncOpenAI(
        base_url=url + "/v1",  # the one line
        api_key="sk-semantic-kernel",
        default_headers={"x-budgetmix-conversation": "sk-run"},
    )
    service = OpenAIChatCompletion(ai_model_id="gpt-4o", async_client=client)
    agent = ChatCompletionAgent(service=service, name="researcher",
                                instructions="Answer the question.", plugins=[Facts()])  # fmt: skip
    out: dict[str, Any] = {}
    try:
        response = await agent.get_response(messages="What is the capital of Peru?")
        out["output"] = str(response.content)
    except Exception as exc:  # what the agent's caller sees
        out["error"] = _chain(exc)
    out.update(calls=CALLS, refused=REFUSED)
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
