"""No secret in any trace: every key format, every placement, through every exporter.

One episode (content capture on) carries each provider's key format in each placement:
message content at a line start, after a tab, inside a JSON string, nested in a tool
result, as a dict key, under a credential-named key, in an exception recorded on a
span, in an event, in the resource. It runs once per exporter ``configure_tracing``
offers (console, jsonl, otlp to the loopback receiver) and through the in-memory one,
with and without :class:`~budgetmix.telemetry.CountingBatchSpanProcessor` in between;
everything exported is searched for every key. A hypothesis property then varies the
text around generated keys.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from budgetmix import Budget, BudgetController
from budgetmix.exceptions import ProviderError
from budgetmix.telemetry import (
    REDACTED,
    CountingBatchSpanProcessor,
    OTLPReceiver,
    RedactingSpanExporter,
    TracingHandle,
    configure,
    configure_tracing,
    redact_content,
    redact_text,
)
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.metrics.export import ConsoleMetricExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

# Shaped like the real thing (lengths and alphabets), valid for nothing.
KEYS = {
    "openai": "sk-" + "T3BlbkFJ" * 6,
    "openai_project": "sk-proj-Ab3_dE5-fG7hI9jK1lM3nO5pQ7rS9tU1vW3xY5zA7bC9dE1fG3hI5",
    "anthropic": "sk-ant-api03-Xy9_Wv8-Ut7Sr6Qp5On4Ml3Kj2Ih1Gf0Ed9Cb8Az7Yx6Wv5Ut4Sr3Qp2-AbCdEfAA",
    "bearer_jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n",
    "aws_access_key": "AKIAIOSFODNN7EXAMPLE",
    "aws_temporary_key": "ASIAQWERTYUIOPASDFGH",
}


def _as_written(name: str, key: str) -> str:
    """The key as it travels: a bearer token only counts after ``Bearer``."""
    return f"Bearer {key}" if name.startswith("bearer") else key


# Each placement wraps one key into the text that reaches content or a span.
PLACEMENTS: dict[str, Callable[[str], str]] = {
    "line_start": lambda k: f"my key is below\n{k}\nthanks",
    "after_tab": lambda k: f"name\t{k}",
    "after_crlf": lambda k: f"header line\r\n{k}",
    "inside_json_string": lambda k: json.dumps({"note": f"see\n{k}"}),
    "json_control_escape": lambda k: json.dumps({"note": f"\x01{k}"}),
    "python_repr": lambda k: repr({"note": f"\t{k}"}),
    "after_underscore": lambda k: f"OPENAI_API_KEY_{k}",
    "env_assignment": lambda k: f"export OPENAI_API_KEY={k}",
    "quoted": lambda k: f'"{k}"',
}


def _secret_texts() -> list[tuple[str, str, str]]:
    """(key name, placement, text) for every key format in every placement."""
    return [
        (name, where, place(_as_written(name, key)))
        for name, key in KEYS.items()
        for where, place in PLACEMENTS.items()
    ]


def _run_episode(provider: TracerProvider, *, capture: bool) -> None:
    """One episode carrying every key in every placement, content capture on or off."""
    texts = [text for _, _, text in _secret_texts()]
    controller = BudgetController(
        Budget(turns=4, tool_calls=50), tracer_provider=provider, capture_content=capture
    )
    with controller.episode() as ep:
        turn = ep.begin_turn(model="m")
        turn.record_content(
            input_messages=[{"role": "user", "content": t} for t in texts],
            output_messages=[{"role": "assistant", "content": [{"type": "text", "text": texts}]}],
        )
        calls = ep.tool_batch(["lookup"] * 6, [f"c{i}" for i in range(6)])
        calls[0].record_arguments({"q": texts})
        calls[0].succeed({"results": [{"out": t, "meta": {"deep": [(t,)]}} for t in texts]})
        calls[1].record_arguments(json.dumps({"q": texts}))  # OpenAI-style JSON arguments
        calls[1].succeed("\n".join(texts))
        calls[2].record_arguments({t: 1 for t in texts})  # a secret as a dict key
        calls[2].succeed({"api_key": "opaque-credential-value", "Authorization": "Basic b3BhcXVl"})
        with pytest.raises(ValueError), calls[3]:  # the error detail holds the keys
            raise ValueError("upstream said:\n" + "\n".join(texts))
        calls[4].fail("\t".join(texts))
        calls[5].succeed()
        turn = ep.begin_turn(model="m")

        def provider_call() -> None:
            raise ProviderError("401 for request with headers:\n" + "\n".join(texts))

        with pytest.raises(ProviderError):
            turn.call(provider_call, sleep=lambda _: None)
        ep.finish(success=True, output="\n".join(texts))


def _emit_user_spans(provider: TracerProvider) -> None:
    """Spans an application writes itself: events, recorded exceptions, a status."""
    texts = [text for _, _, text in _secret_texts()]
    tracer = provider.get_tracer("tests.secrets")
    with tracer.start_as_current_span("chat m") as span:
        span.add_event("retry", {f"text.{i}": t for i, t in enumerate(texts)})
        span.add_event("\n".join(texts[:3]))
        span.set_attribute("http.request.headers", tuple(texts))
        error = ProviderError(
            "401 Unauthorized; request headers {'Authorization': '" + "', 'X': '".join(texts) + "'}"
        )
        span.record_exception(error)
        span.set_status(Status(StatusCode.ERROR, "\n".join(texts)))


def _resource() -> Resource:
    return Resource.create(
        {
            "service.name": "svc",
            "deployment.note": "\n".join(text for _, _, text in _secret_texts()),
        }
    )


def _leaks(exported: bytes | str) -> list[str]:
    data = exported.encode() if isinstance(exported, str) else exported
    return [name for name, key in KEYS.items() if key.encode() in data] + (
        ["opaque credential"] if b"opaque-credential-value" in data or b"b3BhcXVl" in data else []
    )


def _through_handle(handle: TracingHandle, capture: bool) -> None:
    _run_episode(handle.provider, capture=capture)
    _emit_user_spans(handle.provider)
    assert handle.flush(10)


@pytest.mark.parametrize("capture", [True, False], ids=["capture_on", "capture_off"])
def test_in_memory_exporter_without_redacting_processor(capture: bool) -> None:
    """What budgetmix writes itself is masked at write time, whatever processor follows."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _run_episode(provider, capture=capture)
    spans = exporter.get_finished_spans()
    assert len(spans) >= 9
    exported = "\n".join(span.to_json() for span in spans)
    assert _leaks(exported) == []
    if capture:  # the content is there, only the keys are masked
        assert "my key is below" in exported and REDACTED in exported


@pytest.mark.parametrize("capture", [True, False], ids=["capture_on", "capture_off"])
def test_in_memory_exporter_behind_counting_processor(capture: bool) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=_resource(), shutdown_on_exit=False)
    processor = CountingBatchSpanProcessor(exporter)
    provider.add_span_processor(processor)
    _run_episode(provider, capture=capture)
    _emit_user_spans(provider)
    assert processor.force_flush(10_000)
    spans = exporter.get_finished_spans()
    assert len(spans) >= 10
    exported = "\n".join(span.to_json() for span in spans)
    assert _leaks(exported) == []
    assert "exception.stacktrace" in exported and "deployment.note" in exported
    provider.shutdown()


def test_jsonl_exporter(
    tmp_path: Path, handles: list[TracingHandle], otlp_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.note=" + KEYS["openai"])
    path = tmp_path / "t.jsonl"
    handle = configure_tracing(
        "jsonl", path=path, service_name="svc\n" + KEYS["anthropic"], set_global=False
    )
    handles.append(handle)
    _through_handle(handle, capture=True)
    data = path.read_bytes()
    assert data.count(b"\n") >= 10 and b"my key is below" in data
    assert _leaks(data) == []


def test_console_exporter(
    monkeypatch: pytest.MonkeyPatch, handles: list[TracingHandle], otlp_env: None
) -> None:
    # The SDK binds sys.stdout when it is imported: hand the exporters a buffer instead.
    out = io.StringIO()
    monkeypatch.setattr(configure, "ConsoleSpanExporter", partial(ConsoleSpanExporter, out=out))
    monkeypatch.setattr(configure, "ConsoleMetricExporter", partial(ConsoleMetricExporter, out=out))
    handle = configure_tracing("console", service_name="svc\t" + KEYS["openai"], set_global=False)
    handles.append(handle)
    _through_handle(handle, capture=True)
    handle.shutdown()  # also prints the metrics
    text = out.getvalue()
    assert "my key is below" in text and "invoke_agent" in text
    assert _leaks(text) == []


def test_otlp_exporter_to_loopback_receiver(handles: list[TracingHandle], otlp_env: None) -> None:
    with OTLPReceiver() as receiver:
        handle = configure_tracing(
            "otlp",
            endpoint=receiver.endpoint,
            service_name="svc\n" + KEYS["aws_access_key"],
            set_global=False,
        )
        handles.append(handle)
        _through_handle(handle, capture=True)
        assert receiver.wait_for_spans(10, timeout_s=10)
        handle.shutdown()
        requests = list(receiver.requests)
    assert requests and any(b"my key is below" in r.body for r in requests)
    for request in requests:
        assert _leaks(request.raw_body) == [] and _leaks(request.body) == []


# ---------------------------------------------------------------- the masking rules


@pytest.mark.parametrize(("name", "where", "text"), _secret_texts())
def test_redact_text_masks_each_key_in_each_placement(name: str, where: str, text: str) -> None:
    masked = redact_text(text)
    assert KEYS[name] not in masked and REDACTED in masked


def test_redact_text_keeps_lookalikes_and_labels() -> None:
    plain = "ask-me, sk-learn, task-0123456789abc, disk-partition-table, AKIA only"
    assert redact_text(plain) == plain
    assert redact_text("x-api-key: opaque123") == f"x-api-key: {REDACTED}"
    assert redact_text('{"password": "hunter22"}') == f'{{"password": "{REDACTED}"}}'
    assert redact_text("Authorization: Basic dXNlcjpwYXNz") == f"Authorization: {REDACTED}"


class _Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no str")

    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def _cyclic() -> dict[str, Any]:
    loop: dict[str, Any] = {"name": "loop"}
    loop["self"] = loop
    return loop


@pytest.mark.parametrize(
    "value",
    [
        {(1, 2): "tuple key", frozenset({3}): "set key"},
        _cyclic(),
        [_Unprintable()],
        {"k": _Unprintable()},
        _Unprintable(),
        10**5000,  # no decimal str() under Python's digit limit
        [float("nan"), float("inf")],
        {1, 2, 3},
        b"bytes",
    ],
    ids=[
        "non_str_keys",
        "cycle",
        "unprintable_item",
        "unprintable_value",
        "unprintable",
        "huge_int",
        "non_finite",
        "set",
        "bytes",
    ],
)
def test_redact_content_is_total(value: Any) -> None:
    text = redact_content(value)
    assert isinstance(text, str) and text
    json.loads(text)  # always valid JSON


def test_redact_content_masks_before_encoding_and_by_key_name() -> None:
    text = redact_content(
        {"a": "x\n" + KEYS["openai"], "api_key": "opaque", "nested": [{"token": 1}]}
    )
    decoded = json.loads(text)
    assert decoded == {"a": f"x\n{REDACTED}", "api_key": REDACTED, "nested": [{"token": 1}]}
    deep: list[Any] = []
    node = deep
    for _ in range(500):
        node.append([])
        node = node[0]
    assert "[too deep]" in redact_content(deep)


# ---------------------------------------------------------------- property

_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
_B64URL = _ALNUM + "_-"
_UPPER_DIGITS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"


def _body(alphabet: str, lo: int, hi: int) -> st.SearchStrategy[str]:
    return st.text(st.sampled_from(alphabet), min_size=lo, max_size=hi)


GENERATED_KEYS = st.one_of(
    _body(_ALNUM, 20, 48).map(lambda b: "sk-" + b),
    _body(_B64URL, 20, 80).map(lambda b: "sk-proj-" + b),
    _body(_B64URL, 20, 95).map(lambda b: "sk-ant-api03-" + b),
    _body(_B64URL + ".~+/", 20, 60).map(lambda b: "Bearer " + b),
    _body(_UPPER_DIGITS, 16, 16).map(lambda b: "AKIA" + b),
    _body(_UPPER_DIGITS, 16, 16).map(lambda b: "ASIA" + b),
)
# What may stand right before or after a key: anything that is not part of a key.
SEPARATORS = st.sampled_from(
    [
        "",
        " ",
        "\n",
        "\t",
        "\r\n",
        "\x00",
        "\x01",
        "\x1b",
        '"',
        "'",
        ":",
        "=",
        "(",
        ",",
        ";",
        "\\",
        "/",
        "\u00a0",
        "\u2028",
        "é ",
    ]
)
STRUCTURES: list[Callable[[str], Any]] = [
    lambda t: t,
    lambda t: [{"role": "user", "content": t}],
    lambda t: {"results": [{"out": t}], "meta": {"deep": [[t]]}},
    lambda t: json.dumps({"arguments": t}),
    lambda t: json.dumps(json.dumps([t])),
    lambda t: repr([t]),
    lambda t: {t: "as a key"},
]


def _exported_text(structure: Any) -> str:
    """What an exporter sees for ``structure`` captured as content and as raw attributes."""
    inner = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"note": str(structure)}))
    provider.add_span_processor(SimpleSpanProcessor(RedactingSpanExporter(inner)))
    with provider.get_tracer("prop").start_as_current_span(str(structure)[:50]) as span:
        span.set_attribute("content", redact_content(structure))
        span.set_attribute("raw", structure if isinstance(structure, str) else repr(structure))
        span.add_event("e", {"raw": json.dumps(structure, default=str)})
        span.record_exception(ValueError(structure))
    (exported,) = inner.get_finished_spans()
    return exported.to_json()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    key=GENERATED_KEYS,
    before=st.text(max_size=12),
    sep_before=SEPARATORS,
    sep_after=SEPARATORS,
    after=st.text(max_size=12),
    shape=st.sampled_from(range(len(STRUCTURES))),
)
def test_property_no_generated_key_survives_export(
    key: str, before: str, sep_before: str, sep_after: str, after: str, shape: int
) -> None:
    if sep_before == "" and before[-1:].isalnum():
        before += " "  # a key glued to a word is not recognisable as a key
    secret = key.removeprefix("Bearer ")
    assume(secret not in before + after)  # the same characters, not standing as a key
    text = f"{before}{sep_before}{key}{sep_after}{after}"
    structure = STRUCTURES[shape](text)
    exported = _exported_text(structure)
    assert secret not in exported
    assert secret not in redact_content(structure)
