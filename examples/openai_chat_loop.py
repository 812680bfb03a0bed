"""Your own tool loop on OpenAI Chat Completions, budgeted by wrapping the client.

    python examples/openai_chat_loop.py

With ``OPENAI_API_KEY`` set it calls OpenAI (model ``$BUDGETMIX_MODEL``, default
``gpt-4o-mini``); add ``OPENAI_BASE_URL`` for any OpenAI-compatible server
(vLLM ``http://localhost:8000/v1``, Ollama ``http://localhost:11434/v1``; the key
may then be any string). Without a key it runs offline against budgetmix's
scripted fake server on 127.0.0.1.

The loop is ordinary OpenAI code: ``budgeted(client, controller)`` is the only
change. Each ``create`` charges a turn before sending and carries the budget
notice after the latest message; tool calls go through ``ep.tool_batch`` so the
parallel batch is pre-checked and failures become mistakes.
"""

from __future__ import annotations

import json
import os
from typing import Any

import openai
from budgetmix import Budget, BudgetController, EpisodeResult
from budgetmix.adapters import budgeted
from budgetmix.adapters.testing import FakeLLMServer, Reply

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


def add(a: int, b: int) -> int:
    return a + b


def connect() -> tuple[openai.OpenAI, str, FakeLLMServer | None]:
    """A real client when a key is configured, else one on the local fake server."""
    model = os.environ.get("BUDGETMIX_MODEL", "gpt-4o-mini")
    if os.environ.get("OPENAI_API_KEY"):
        return openai.OpenAI(), model, None
    print("OPENAI_API_KEY is not set: using the scripted fake server on 127.0.0.1.")
    print("Set OPENAI_API_KEY (and OPENAI_BASE_URL for vLLM/Ollama) to use a real model.\n")
    server = FakeLLMServer([Reply.call("add", {"a": 19, "b": 23}), Reply.say("19 + 23 = 42")])
    server.start()
    return openai.OpenAI(base_url=server.base_url, api_key="fake"), model, server


def main() -> EpisodeResult:
    client, model, server = connect()
    controller = BudgetController(Budget(turns=4, tool_calls=4), name="calculator")
    llm = budgeted(client, controller)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "What is 19 + 23? Use the tool."}]
    try:
        # the chat session this run serves: a backend groups its traces by it
        with controller.episode(conversation_id="chat-loop-1") as ep:
            while True:
                reply = llm.chat.completions.create(model=model, messages=messages, tools=TOOLS)
                message = reply.choices[0].message
                messages.append(message.model_dump(exclude_none=True))
                if not message.tool_calls:
                    ep.finish(True, message.content)
                    break
                calls = [c for c in message.tool_calls if c.type == "function"]
                batch = ep.tool_batch([c.function.name for c in calls], [c.id for c in calls])
                for call, request in zip(batch, calls, strict=True):
                    try:
                        result = call.run(add, **json.loads(request.function.arguments))
                    except Exception as exc:  # the model sees the error and may recover
                        result = f"error: {exc}"
                    messages.append(
                        {"role": "tool", "tool_call_id": request.id, "content": json.dumps(result)}
                    )
    finally:
        if server is not None:
            server.stop()
    result = ep.result
    assert result is not None
    print(f"answer: {result.final_output}")
    print(f"status: {result.status}, turns used: {result.turns_used} of 4")
    print(f"mistakes: {len(result.mistakes)}, cost: ${result.used['cost_usd']:.6f}")
    return result


if __name__ == "__main__":
    main()
