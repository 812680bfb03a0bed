"""Budgeted episodes as an observability backend shows them (Arize Phoenix, Jaeger, ...).

    phoenix serve &                       # in its own virtualenv: scripts/install_phoenix.sh
    python examples/traces_in_a_backend.py http://127.0.0.1:6006

Four episodes of an OpenAI-SDK agent under ``budgeted(client)`` (the model is the
scripted fake LLM, so no key is needed), exported over OTLP/HTTP with content captured:

* ``conv-1``: two episodes of one conversation: a tool call then the answer, and a
  follow-up question; a backend's sessions view shows them as one session;
* ``conv-2``: a one-turn budget the agent outruns: ``budget_exhausted``, an ERROR span;
* ``conv-3``: an answer the caller judges wrong: ``failed``, an ERROR span.

Each ``chat`` span carries its messages in the GenAI conventions' format, each episode
span the task and the final answer; tokens and cost are on every turn.
"""

from __future__ import annotations

import contextlib
import json
import sys
from dataclasses import dataclass
from typing import Any

import httpx
import openai
from budgetmix import Budget, BudgetController, BudgetExhausted, EpisodeResult
from budgetmix.adapters import budgeted
from budgetmix.adapters.testing import FakeLLMServer, Reply
from budgetmix.telemetry import configure_tracing

MODEL = "gpt-4o-mini"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup_order",
            "description": "The status of an order.",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}},
                "required": ["order_id"],
            },
        },
    }
]


@dataclass
class Exported:
    """What the run sent: each episode's result, and the spans exported."""

    results: list[EpisodeResult]
    spans: int


def _client(replies: list[Reply]) -> openai.OpenAI:
    http = httpx.Client(transport=FakeLLMServer(replies).transport())  # type: ignore[arg-type]
    return openai.OpenAI(api_key="fake", base_url="http://fake.test/v1", http_client=http)


def _ask(llm: Any, messages: list[Any]) -> Any:
    message = llm.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
    messages.append(message.choices[0].message.model_dump(exclude_none=True))
    return message.choices[0].message


def _support(controller: BudgetController, conversation: str, question: str) -> EpisodeResult:
    """An episode that looks an order up, then answers."""
    llm = budgeted(
        _client([Reply.call("lookup_order", {"order_id": "A-1001"}), Reply.say("It ships today.")]),
        controller,
    )
    messages: list[Any] = [{"role": "user", "content": question}]
    with controller.episode(name="support-agent", conversation_id=conversation) as ep:
        for call in _ask(llm, messages).tool_calls or ():
            result = json.dumps({"order": "A-1001", "status": "packed"})
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        answer = _ask(llm, messages).content
        ep.finish(success=True, output=answer)
    assert ep.result is not None
    return ep.result


def _follow_up(controller: BudgetController, conversation: str, *, judge_ok: bool) -> EpisodeResult:
    """A one-answer episode; ``judge_ok`` False: the caller rejects the answer."""
    llm = budgeted(_client([Reply.say("Tomorrow before noon.")]), controller)
    messages: list[Any] = [{"role": "user", "content": "When will it arrive?"}]
    with controller.episode(name="support-agent", conversation_id=conversation) as ep:
        ep.finish(success=judge_ok, output=_ask(llm, messages).content)
    assert ep.result is not None
    return ep.result


def _outrun(controller: BudgetController, conversation: str) -> EpisodeResult:
    """An agent that wants a second turn on a one-turn budget."""
    replies = [Reply.call("lookup_order", {"order_id": "A-1002"}), Reply.say("never sent")]
    llm = budgeted(_client(replies), controller)
    messages: list[Any] = [{"role": "user", "content": "Where is order A-1002?"}]
    with controller.episode(
        name="support-agent", budget=Budget(turns=1), conversation_id=conversation
    ) as ep:
        call = _ask(llm, messages).tool_calls[0]
        messages.append({"role": "tool", "tool_call_id": call.id, "content": "in transit"})
        with contextlib.suppress(BudgetExhausted):  # the episode ends budget_exhausted
            _ask(llm, messages)  # refused: nothing more is sent
    assert ep.result is not None
    return ep.result


def main(
    endpoint: str, *, project: str = "budgetmix", capture_content: bool = True, prefix: str = ""
) -> Exported:
    """Run the four episodes and export them to ``endpoint`` (OTLP/HTTP base URL),
    into the Phoenix project ``project`` (the ``x-project-name`` header); conversation
    ids start with ``prefix``."""
    tracing = configure_tracing(
        "otlp", endpoint=endpoint, headers={"x-project-name": project}, set_global=False,
        metrics="none", service_name="support-app",
    )  # fmt: skip
    controller = BudgetController(
        Budget(turns=4),
        provider_name="openai",
        tracer_provider=tracing.provider,
        capture_content=capture_content,
    )
    results = [
        _support(controller, f"{prefix}conv-1", "Has order A-1001 shipped?"),
        _follow_up(controller, f"{prefix}conv-1", judge_ok=True),
        _outrun(controller, f"{prefix}conv-2"),
        _follow_up(controller, f"{prefix}conv-3", judge_ok=False),
    ]
    tracing.flush()
    tracing.shutdown()
    return Exported(results, tracing.stats().exported)


if __name__ == "__main__":
    done = main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:6006")
    for r in done.results:
        print(f"{r.status:<17} turns={r.used['turns']:.0f} cost=${r.used['cost_usd']:.6f}")
    print(f"{done.spans} spans exported")
