"""Your own tool loop on Anthropic Messages (streamed), budgeted by wrapping the client.

    python examples/anthropic_loop.py

With ``ANTHROPIC_API_KEY`` set it calls Anthropic (model ``$BUDGETMIX_MODEL``,
default ``claude-haiku-4-5``; ``ANTHROPIC_BASE_URL`` for a compatible server).
Without a key it runs offline against budgetmix's scripted fake server on 127.0.0.1.

The notice is appended as a text block after the ``tool_result`` blocks of the
last user turn (where the API requires tool results to come first). A tool
that fails is reported with ``is_error: true``; budgetmix records it as a
``tool_error`` mistake, and the next successful call as a recovery.
"""

from __future__ import annotations

import os
from typing import Any

import anthropic
from budgetmix import Budget, BudgetController, EpisodeResult
from budgetmix.adapters import budgeted
from budgetmix.adapters.testing import FakeLLMServer, Reply

TOOLS = [
    {
        "name": "lookup_capital",
        "description": "The capital city of a country.",
        "input_schema": {
            "type": "object",
            "properties": {"country": {"type": "string"}},
            "required": ["country"],
        },
    }
]
CAPITALS = {"france": "Paris", "japan": "Tokyo"}


def lookup_capital(country: str) -> str:
    return CAPITALS[country.lower()]  # KeyError for unknown countries: a tool error


def connect() -> tuple[anthropic.Anthropic, str, FakeLLMServer | None]:
    """A real client when a key is configured, else one on the local fake server."""
    model = os.environ.get("BUDGETMIX_MODEL", "claude-haiku-4-5")
    if os.environ.get("ANTHROPIC_API_KEY"):
        return anthropic.Anthropic(), model, None
    print("ANTHROPIC_API_KEY is not set: using the scripted fake server on 127.0.0.1.\n")
    server = FakeLLMServer(
        [
            Reply.call("lookup_capital", {"country": "Frnace"}),
            Reply.call("lookup_capital", {"country": "France"}),
            Reply.say("The capital of France is Paris."),
        ]
    )
    server.start()
    return anthropic.Anthropic(base_url=server.root_url, api_key="fake"), model, server


def main() -> EpisodeResult:
    client, model, server = connect()
    controller = BudgetController(Budget(turns=5), name="geographer")
    llm = budgeted(client, controller)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "What is the capital of France?"}]
    try:
        # the chat session this run serves: a backend groups its traces by it
        with controller.episode(conversation_id="anthropic-loop-1") as ep:
            while True:
                with llm.messages.stream(
                    model=model, max_tokens=512, messages=messages, tools=TOOLS
                ) as stream:
                    reply = stream.get_final_message()
                messages.append(
                    {
                        "role": "assistant",
                        "content": [b.model_dump(exclude_none=True) for b in reply.content],
                    }
                )
                uses = [b for b in reply.content if b.type == "tool_use"]
                if not uses:
                    ep.finish(True, "".join(b.text for b in reply.content if b.type == "text"))
                    break
                results = []
                for call, use in zip(
                    ep.tool_batch([u.name for u in uses], [u.id for u in uses]), uses, strict=True
                ):
                    try:
                        content, is_error = call.run(lookup_capital, **dict(use.input)), False
                    except KeyError as exc:
                        content, is_error = f"unknown country {exc}", True
                    results.append(
                        {
                            "type": "tool_result",
                            "tool_use_id": use.id,
                            "content": content,
                            "is_error": is_error,
                        }
                    )
                messages.append({"role": "user", "content": results})
    finally:
        if server is not None:
            server.stop()
    result = ep.result
    assert result is not None
    print(f"answer: {result.final_output}")
    print(
        f"status: {result.status}, turns: {result.turns_used}, "
        f"mistakes: {[str(m.kind) for m in result.mistakes]}, recoveries: {len(result.recoveries)}"
    )
    return result


if __name__ == "__main__":
    main()
