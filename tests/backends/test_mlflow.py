"""budgetmix traces in a real MLflow tracking server (3.x, ``-m backends``), next to
Phoenix: an OpenAI episode (a tool call on the documented ``ep.tool_batch`` /
``call.run`` path), an Anthropic episode, an exhausted one and one whose tool fails,
exported over OTLP/HTTP (``/v1/traces``) with content captured, and read back with
MLflow's own client: messages, tool arguments and error text, tokens equal to the
ledger's, and each trace's status."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from _mlflow import MLflow, mlflow_executable, start_mlflow, stop_mlflow
from budgetmix import Budget, BudgetController, EpisodeResult
from budgetmix.adapters import budgeted
from budgetmix.adapters.testing import FakeLLMServer, Reply
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

pytestmark = [pytest.mark.backends, pytest.mark.slow]
otlp = pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")
openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")
httpx = pytest.importorskip("httpx")
httpx2 = pytest.importorskip("httpx2")

LOOKUP = {
    "type": "function",
    "function": {
        "name": "lookup_order",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
    },
}


@pytest.fixture(scope="module")
def mlflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MLflow]:
    """One MLflow server for the module."""
    if mlflow_executable() is None:
        reason = "no MLflow: bash scripts/install_mlflow.sh (or set BUDGETMIX_MLFLOW)"
        if __import__("os").environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    server = start_mlflow(tmp_path_factory.mktemp("mlflow"))
    yield server
    stop_mlflow(server)


def _openai(fake: FakeLLMServer, controller: BudgetController) -> Any:
    http = httpx.Client(transport=fake.transport())
    sdk = openai.OpenAI(api_key="test", base_url="http://fake.test/v1", http_client=http)
    return budgeted(sdk, controller)


def _lookup(order_id: str) -> str:
    if order_id == "B-2":
        raise RuntimeError(f"warehouse offline for {order_id}")
    return json.dumps({"order_id": order_id, "status": "packed"})


def _support(controller: BudgetController, order: str, name: str) -> EpisodeResult:
    """A support episode: the model asks for the order, the tool runs, the model answers."""
    fake = FakeLLMServer([Reply.call("lookup_order", {"order_id": order}), Reply.say("Packed.")])
    client = _openai(fake, controller)
    messages: list[Any] = [{"role": "user", "content": f"Where is order {order}?"}]
    with controller.episode(name=name, conversation_id=name) as ep:
        for _ in range(2):
            reply = client.chat.completions.create(
                model="gpt-4o-mini", messages=messages, tools=[LOOKUP]
            )
            message = reply.choices[0].message
            if not message.tool_calls:
                ep.finish(True, message.content)
                break
            messages.append(message.model_dump(exclude_none=True))
            (tc,) = message.tool_calls
            (call,) = ep.tool_batch([tc.function.name], [tc.id])
            try:
                result = call.run(_lookup, **json.loads(tc.function.arguments))
            except RuntimeError as exc:
                result = f"Error: {exc}"
            messages.append({"role": "tool", "tool_call_id": tc.id, "content": result})
    assert ep.result is not None
    return ep.result


def _anthropic(controller: BudgetController) -> EpisodeResult:
    fake = FakeLLMServer([Reply.say("Hello from Claude.")])
    http = httpx2.Client(transport=fake.transport())
    sdk = anthropic.Anthropic(api_key="test", base_url="http://fake.test", http_client=http)
    client = budgeted(sdk, controller)
    with controller.episode(name="claude", conversation_id="claude") as ep:
        reply = client.messages.create(
            model="claude-test", max_tokens=64, messages=[{"role": "user", "content": "Hi"}]
        )
        ep.finish(True, reply.content[0].text)
    assert ep.result is not None
    return ep.result


def _exhausted(controller: BudgetController) -> EpisodeResult:
    fake = FakeLLMServer([Reply.call("lookup_order", {"order_id": "C-3"}) for _ in range(3)])
    client = _openai(fake, controller)
    messages: list[Any] = [{"role": "user", "content": "Check C-3 again and again."}]
    with controller.episode(name="outrun", budget=Budget(turns=1)) as ep:
        for _ in range(3):
            client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=[LOOKUP])
    assert ep.result is not None
    return ep.result


@pytest.fixture(scope="module")
def stored(mlflow: MLflow) -> tuple[dict[str, EpisodeResult], dict[str, Any]]:
    """The four episodes, exported; what MLflow stored of them, by trace id."""
    experiment = mlflow.experiment("budgetmix")
    exporter = otlp.OTLPSpanExporter(
        endpoint=f"{mlflow.url}/v1/traces", headers={"x-mlflow-experiment-id": experiment}
    )
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    controller = BudgetController(
        Budget(turns=4, tool_calls=4), tracer_provider=provider, capture_content=True
    )
    results = {
        "openai": _support(controller, "A-1", "openai"),
        "anthropic": _anthropic(controller),
        "exhausted": _exhausted(controller),
        "tool_error": _support(controller, "B-2", "tool_error"),
    }
    provider.shutdown()
    traces = {t["trace_id"]: t for t in mlflow.traces(experiment, expected=4)}
    return results, traces


def _trace(stored: Any, key: str) -> Any:
    results, traces = stored
    tid = results[key].trace_id
    found = [t for t in traces.values() if tid in t["trace_id"]]
    assert len(found) == 1, (key, tid, list(traces))
    return found[0]


def _spans(trace: Any, prefix: str) -> list[Any]:
    return [s for s in trace["spans"] if s["name"].startswith(prefix)]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def test_every_episode_arrived_with_its_spans(stored: Any) -> None:
    results, traces = stored
    assert len(traces) == 4
    names = {k: sorted(s["name"].split()[0] for s in _trace(stored, k)["spans"]) for k in results}
    two_turns_one_tool = ["chat", "chat", "execute_tool", "invoke_agent"]
    assert names["openai"] == names["tool_error"] == two_turns_one_tool, names
    assert names["anthropic"] == ["chat", "invoke_agent"], names
    assert names["exhausted"].count("invoke_agent") == 1, names
    assert names["exhausted"].count("chat") == 1, names  # the refused turn sent nothing


@pytest.mark.parametrize("key", ["openai", "anthropic", "exhausted", "tool_error"])
def test_tokens_equal_the_ledger(stored: Any, key: str) -> None:
    results, _ = stored
    trace, used = _trace(stored, key), results[key].used
    chats = _spans(trace, "chat")
    assert sum(int(s["attributes"]["gen_ai.usage.input_tokens"]) for s in chats) == used[
        "input_tokens"
    ]
    assert sum(int(s["attributes"]["gen_ai.usage.output_tokens"]) for s in chats) == used[
        "output_tokens"
    ]
    usage = trace["token_usage"]  # MLflow's own sum over the trace
    if usage:
        assert usage.get("input_tokens") == used["input_tokens"]
        assert usage.get("output_tokens") == used["output_tokens"]


def test_messages_and_tool_arguments_are_stored(stored: Any) -> None:
    trace = _trace(stored, "openai")
    first = sorted(_spans(trace, "chat"), key=lambda s: s["attributes"]["budgetmix.turn"])[0]
    assert "Where is order A-1?" in _text(first["attributes"]["gen_ai.input.messages"])
    assert "lookup_order" in _text(first["attributes"]["gen_ai.output.messages"])
    (tool,) = _spans(trace, "execute_tool")
    assert "A-1" in _text(tool["attributes"]["gen_ai.tool.call.arguments"])
    assert "packed" in _text(tool["attributes"]["gen_ai.tool.call.result"])
    claude = _spans(_trace(stored, "anthropic"), "chat")[0]["attributes"]
    assert claude["gen_ai.provider.name"] == "anthropic"
    assert "Hello from Claude." in _text(claude["gen_ai.output.messages"])


def test_a_failed_tool_keeps_its_arguments_and_error_text(stored: Any) -> None:
    (tool,) = _spans(_trace(stored, "tool_error"), "execute_tool")
    assert "ERROR" in tool["status"]["code"]
    assert "warehouse offline for B-2" in str(tool["status"]["description"])
    assert "B-2" in _text(tool["attributes"]["gen_ai.tool.call.arguments"])
    (event,) = [e for e in tool["events"] if e["name"] == "exception"]
    assert "warehouse offline" in str(event["attributes"]["exception.message"])


def test_statuses(stored: Any) -> None:
    ok = _spans(_trace(stored, "openai"), "invoke_agent")[0]
    assert "ERROR" not in ok["status"]["code"]
    exhausted = _trace(stored, "exhausted")
    (agent,) = _spans(exhausted, "invoke_agent")
    assert "ERROR" in agent["status"]["code"]
    assert agent["status"]["description"] == "budget_exhausted: turns"
    assert agent["attributes"]["budgetmix.status"] == "budget_exhausted"
    assert "ERROR" in exhausted["state"]
