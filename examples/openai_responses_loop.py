"""Your own tool loop on the OpenAI Responses API, budgeted by wrapping the client.

    python examples/openai_responses_loop.py

With ``OPENAI_API_KEY`` set it calls OpenAI (model ``$BUDGETMIX_MODEL``, default
``gpt-4o-mini``; ``OPENAI_BASE_URL`` for a compatible server that implements
``/responses``). Without a key it runs offline against budgetmix's scripted fake
server on 127.0.0.1.

The notice is sent as a trailing user input item; the ``input`` list you keep
(function calls and their outputs) never contains it. The stream is read to
its end here, where budgetmix records the turn's usage.
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
        "name": "word_count",
        "description": "Count the words of a text.",
        "parameters": {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
    }
]


def word_count(text: str) -> int:
    return len(text.split())


def connect() -> tuple[openai.OpenAI, str, FakeLLMServer | None]:
    """A real client when a key is configured, else one on the local fake server."""
    model = os.environ.get("BUDGETMIX_MODEL", "gpt-4o-mini")
    if os.environ.get("OPENAI_API_KEY"):
        return openai.OpenAI(), model, None
    print("OPENAI_API_KEY is not set: using the scripted fake server on 127.0.0.1.\n")
    server = FakeLLMServer(
        [Reply.call("word_count", {"text": "to be or not to be"}), Reply.say("It has 6 words.")]
    )
    server.start()
    return openai.OpenAI(base_url=server.base_url, api_key="fake"), model, server


def main() -> EpisodeResult:
    client, model, server = connect()
    controller = BudgetController(Budget(turns=3), name="counter")
    llm = budgeted(client, controller)
    items: list[Any] = [{"role": "user", "content": "How many words in 'to be or not to be'?"}]
    try:
        # the chat session this run serves: a backend groups its traces by it
        with controller.episode(conversation_id="responses-loop-1") as ep:
            while True:
                stream = llm.responses.create(model=model, input=items, tools=TOOLS, stream=True)
                final = None
                for event in stream:
                    if event.type == "response.completed":
                        final = event.response
                assert final is not None, "the stream ended without response.completed"
                calls = [o for o in final.output if o.type == "function_call"]
                items.extend(o.model_dump(exclude_none=True) for o in final.output)
                if not calls:
                    ep.finish(True, final.output_text)
                    break
                batch = ep.tool_batch([c.name for c in calls], [c.call_id for c in calls])
                for call, request in zip(batch, calls, strict=True):
                    result = call.run(word_count, **json.loads(request.arguments))
                    items.append(
                        {
                            "type": "function_call_output",
                            "call_id": request.call_id,
                            "output": str(result),
                        }
                    )
    finally:
        if server is not None:
            server.stop()
    result = ep.result
    assert result is not None
    print(f"answer: {result.final_output}")
    print(
        f"status: {result.status}, turns: {result.turns_used}, tokens in/out: "
        f"{result.used['input_tokens']:.0f}/{result.used['output_tokens']:.0f}"
    )
    return result


if __name__ == "__main__":
    main()
