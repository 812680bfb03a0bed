"""Export budgetmix traces over OTLP/HTTP: episodes, turns, tools, mistakes, recoveries.

    python examples/export_traces_otlp.py

With ``OTEL_EXPORTER_OTLP_ENDPOINT`` set (e.g. ``http://localhost:4318`` for a
collector, Jaeger or Phoenix) spans go there; otherwise a loopback OTLP receiver
(``budgetmix.telemetry.OTLPReceiver``) collects them and the example prints what arrived.
The model is OpenAI when ``OPENAI_API_KEY`` is set, else the scripted fake server.

Spans follow the OpenTelemetry GenAI conventions (``invoke_agent``, ``chat``,
``execute_tool``) plus ``budgetmix.*`` attributes and events for the budget.
"""

from __future__ import annotations

import json
import os
from typing import Any

import openai
from budgetmix import Budget, BudgetController
from budgetmix.adapters import budgeted
from budgetmix.adapters.testing import FakeLLMServer, Reply
from budgetmix.telemetry import OTLPReceiver, configure_tracing

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "square",
            "description": "Square a number.",
            "parameters": {
                "type": "object",
                "properties": {"x": {"type": "number"}},
                "required": ["x"],
            },
        },
    }
]


def main() -> list[dict[str, Any]]:
    receiver = None
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if endpoint is None:
        receiver = OTLPReceiver().start()
        endpoint = receiver.endpoint
        print(f"OTEL_EXPORTER_OTLP_ENDPOINT is not set: exporting to {endpoint} (loopback)")
    tracing = configure_tracing(exporter="otlp", endpoint=endpoint, set_global=False)

    server = None
    model = os.environ.get("BUDGETMIX_MODEL", "gpt-4o-mini")
    if os.environ.get("OPENAI_API_KEY"):
        client = openai.OpenAI()
    else:
        server = FakeLLMServer(
            [
                Reply.call("square", '{"x": "seven"}'),
                Reply.call("square", {"x": 7}),
                Reply.say("49"),
            ]
        ).start()
        client = openai.OpenAI(base_url=server.base_url, api_key="fake")

    controller = BudgetController(
        Budget(turns=4), name="squarer", provider_name="openai", tracer_provider=tracing.provider
    )
    llm = budgeted(client, controller)
    messages: list[Any] = [{"role": "user", "content": "What is 7 squared? Use the tool."}]
    try:
        # the chat session this run serves: a backend groups its traces by it
        with controller.episode(conversation_id="squarer-1") as ep:
            for _ in range(4):
                message = (
                    llm.chat.completions.create(model=model, messages=messages, tools=TOOLS)
                    .choices[0]
                    .message
                )
                messages.append(message.model_dump(exclude_none=True))
                if not message.tool_calls:
                    ep.finish(True, message.content)
                    break
                flagged = {m.call_id for m in ep.mistakes}  # bad calls the wrapper caught
                for tc in message.tool_calls:
                    if tc.type != "function":
                        continue
                    if tc.id in flagged:
                        content = "error: arguments do not match the tool's schema"
                    else:
                        with ep.tool_call(tc.function.name, tc.id) as call:
                            content = str(json.loads(tc.function.arguments)["x"] ** 2)
                            call.succeed(content)
                    messages.append({"role": "tool", "tool_call_id": tc.id, "content": content})
    finally:
        if server is not None:
            server.stop()
        tracing.flush()
        tracing.shutdown()

    spans: list[dict[str, Any]] = []
    if receiver is not None:
        receiver.wait_for_spans(1, timeout_s=5)
        spans = receiver.spans
        receiver.stop()
        for span in spans:
            events = [e["name"] for e in span.get("events", [])]
            print(f"  {span['name']:<24} events={events}")
    assert ep.result is not None
    print(
        f"status: {ep.result.status}, mistakes: {len(ep.result.mistakes)}, "
        f"recoveries: {len(ep.result.recoveries)}, trace id: {ep.result.trace_id}"
    )
    return spans


if __name__ == "__main__":
    main()
