"""Issue 30, item 3: redaction sees through encodings, log records and written data.

For every key format: percent-encoding (of the key, of the separator before it, twice),
JSON ``\\u`` escapes, HTML entities (decimal, hex, ``&amp;`` separators) and keys glued
to a letter or digit, placed by hypothesis inside random text. Each property fails if
any decoding of the output still holds the key. Base64 is not covered (documented).
"""

from __future__ import annotations

import html
import json
import logging
import math
import urllib.parse
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from budgetmix.telemetry.log_redaction import RedactingLogFilter, redact_log_records
from budgetmix.telemetry.redaction import (
    REDACTED,
    redact_content,
    redact_data,
    redact_text,
)
from hypothesis import given, settings
from hypothesis import strategies as st

# Shaped like the real thing (as in tests/sdk/telemetry/test_secrets.py), valid for nothing.
KEYS = {
    "openai": "sk-" + "T3BlbkFJ" * 6,
    "openai_project": "sk-proj-Ab3_dE5-fG7hI9jK1lM3nO5pQ7rS9tU1vW3xY5zA7bC9dE1fG3hI5",
    "anthropic": "sk-ant-api03-Xy9_Wv8-Ut7Sr6Qp5On4Ml3Kj2Ih1Gf0Ed9Cb8Az7Yx6Wv5Ut4Sr3Qp2-AbCdEfAA",
    "bearer_jwt": "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N",
    "aws_access_key": "AKIAIOSFODNN7EXAMPLE",
    "aws_temporary_key": "ASIAQWERTYUIOPASDFGH",
}


def secret_part(key: str) -> str:
    """What must never be readable: the key minus its well-known prefix."""
    for prefix in ("Bearer ", "sk-ant-", "sk-proj-", "sk-", "AKIA", "ASIA"):
        if key.startswith(prefix):
            return key[len(prefix) :][:16]
    raise AssertionError(key)


def _json_escape(text: str) -> str:
    return "".join(f"\\u{ord(c):04x}" for c in text)


ENCODINGS: dict[str, Callable[[str], str]] = {
    "percent_key": lambda k: urllib.parse.quote(k, safe=""),
    "percent_label": lambda k: "token%3D" + urllib.parse.quote(k, safe="-_."),
    "percent_query": lambda k: "q=1%26" + k.replace(" ", "%20"),
    "percent_twice": lambda k: urllib.parse.quote(urllib.parse.quote(k, safe=""), safe=""),
    "json_first_char": lambda k: _json_escape(k[0]) + k[1:],
    "json_whole": _json_escape,
    "html_decimal": lambda k: f"&#{ord(k[0])};" + k[1:],
    "html_hex": lambda k: "".join(f"&#x{ord(c):x};" for c in k),
    "html_amp": lambda k: "q=1&amp;" + html.escape(k),
    "glued_letter": lambda k: "x" + k,
    "glued_digit": lambda k: "7" + k,
}
# "Bearer" counts only at the start of a word: gluing it to a letter makes another word.
GLUE_FREE = {"bearer_jwt"}

TEXT = st.text(alphabet="abcdefghij KLMNOP0123456789.,:;()[]{}\"'\n\t=/-_", max_size=40)
BEFORE = TEXT.map(lambda t: t if not t or not t[-1].isalnum() else t + " ")


def readable_forms(text: str) -> list[str]:
    """``text`` and every decoding of it an attacker could apply, up to three layers."""
    forms = [text]
    for _ in range(3):
        last = forms[-1]
        forms.append(html.unescape(urllib.parse.unquote(json.loads(json.dumps(last)))))
        forms.append(urllib.parse.unquote(last))
        forms.append(html.unescape(last))
        forms.append(last.encode("utf-8", "surrogateescape").decode("unicode_escape", "replace"))
    return forms


# A bearer token counts only after the word 'Bearer', so it has no glued form.
CASES = sorted(
    (name, encoding)
    for name in KEYS
    for encoding in ENCODINGS
    if not (name in GLUE_FREE and encoding.startswith("glued"))
)


@pytest.mark.parametrize(("name", "encoding"), CASES)
def test_each_encoding_of_each_key_is_masked(name: str, encoding: str) -> None:
    key = KEYS[name]
    out = redact_text("see " + ENCODINGS[encoding](key) + " there")
    assert REDACTED in out
    for form in readable_forms(out):
        assert secret_part(key) not in form, (encoding, out)


@settings(max_examples=300, deadline=None)
@given(
    name=st.sampled_from(sorted(KEYS)),
    encoding=st.sampled_from(sorted(ENCODINGS)),
    before=BEFORE,
    after=TEXT.map(lambda t: " " + t),
)
def test_property_an_encoded_key_anywhere_in_text_is_masked(
    name: str, encoding: str, before: str, after: str
) -> None:
    if name in GLUE_FREE and encoding.startswith("glued"):
        return
    key = KEYS[name]
    out = redact_text(before + ENCODINGS[encoding](key) + after)
    for form in readable_forms(out):
        assert secret_part(key) not in form, (before, encoding, after, out)


@pytest.mark.parametrize("encoding", ["percent_label", "json_whole", "html_hex"])
def test_captured_content_masks_encoded_keys_too(encoding: str) -> None:
    key = KEYS["openai"]
    out = redact_content({"messages": [{"content": "use " + ENCODINGS[encoding](key)}]})
    assert all(secret_part(key) not in form for form in readable_forms(out))


def test_plain_text_with_percent_signs_and_entities_is_left_alone() -> None:
    for text in ("50% done &amp; 20%3D more", "disk-usage-2024-report-final", "a\\u0041b"):
        assert redact_text(text) == text


def test_base64_is_not_decoded_as_documented() -> None:
    import base64

    hidden = base64.b64encode(KEYS["openai"].encode()).decode()
    assert redact_text("blob " + hidden) == "blob " + hidden


def test_the_http_clients_log_record_is_redacted(caplog: pytest.LogCaptureFixture) -> None:
    key = KEYS["openai_project"]
    redact_log_records()  # what importing budgetmix's adapters does
    http = httpx.Client(transport=httpx.MockTransport(lambda request: httpx.Response(200)))
    with caplog.at_level(logging.INFO, logger="httpx"):
        http.get("http://fake.test/v1/models", params={"key": key, "q": "1"})
    lines = [r.getMessage() for r in caplog.records if r.name == "httpx"]
    assert lines and all(secret_part(key) not in line for line in lines), lines
    assert any("fake.test/v1/models" in line for line in lines)  # the rest is kept


def test_importing_the_adapters_installs_the_log_redaction() -> None:
    import budgetmix.adapters._streams  # noqa: F401

    record = logging.getLogRecordFactory()(
        "openai._base_client", logging.DEBUG, __file__, 1, "headers %s",
        ({"authorization": "Bearer " + KEYS["openai"]},), None,
    )
    assert secret_part(KEYS["openai"]) not in record.getMessage()


def test_the_log_filter_masks_any_record_and_keeps_it() -> None:
    args = (KEYS["anthropic"],)
    record = logging.LogRecord("mine", logging.INFO, __file__, 1, "k=%s", args, None)
    assert RedactingLogFilter().filter(record) is True
    assert secret_part(KEYS["anthropic"]) not in record.getMessage()


def test_written_data_is_redacted_but_keeps_its_numbers() -> None:
    data = {
        "env_kwargs": {"api_key": "plain-secret", "url": "http://h/?t=" + KEYS["aws_access_key"]},
        "score": math.nan,
        "n": 3,
        "tags": ["ok", "token%3D" + KEYS["openai"]],
    }
    out = redact_data(data)
    assert isinstance(out, dict)
    assert out["env_kwargs"] == {"api_key": REDACTED, "url": "http://h/?t=" + REDACTED}
    assert math.isnan(out["score"]) and out["n"] == 3
    assert out["tags"][0] == "ok" and out["tags"][1].endswith(REDACTED)
    assert secret_part(KEYS["openai"]) not in json.dumps(out)


# -- every file budgetmix writes goes through the same redaction ----------------------
def test_checkpoint_metadata_holds_no_key(tmp_path: Path) -> None:
    from budgetmix.training.data.provenance import write_training_env

    kwargs = {"api_key": "plain-secret", "base_url": "http://h/v1?key=" + KEYS["openai"]}
    path = write_training_env(tmp_path, "faulty-tools", kwargs)
    text = path.read_text()
    assert "plain-secret" not in text and secret_part(KEYS["openai"]) not in text
    assert json.loads(text)["env"] == "faulty-tools"  # the rest as it was


def test_recordings_hold_no_key(tmp_path: Path) -> None:
    from budgetmix.adapters.base import ChatMessage
    from budgetmix.training.data.recordings import RecordedEpisode, read_episodes, write_episodes

    key = KEYS["anthropic"]
    record = RecordedEpisode(
        messages=(
            ChatMessage(role="user", content="my key is token%3D" + key),
            ChatMessage(role="assistant", content="ok"),
        )
    )
    path = write_episodes(tmp_path / "rec.jsonl", [record])
    assert secret_part(key) not in path.read_text()
    assert read_episodes(path)[0].messages[1].content == "ok"


def test_eval_outputs_hold_no_key(tmp_path: Path) -> None:
    from budgetmix.evaluation.results import ResultsWriter

    key = KEYS["aws_access_key"]
    with ResultsWriter(tmp_path / "results.jsonl", {"model": "m"}) as writer:
        writer.write_run({"note": "q=1&amp;" + key})
    text = (tmp_path / "results.jsonl").read_text()
    assert secret_part(key) not in text and '"model": "m"' in text


@pytest.mark.parametrize(
    "encoding", ["percent_label", "json_first_char", "html_amp", "glued_digit"]
)
def test_the_span_exporter_masks_encoded_keys(encoding: str) -> None:
    from budgetmix.telemetry import RedactingSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    key = KEYS["aws_access_key"] if encoding == "html_amp" else KEYS["openai_project"]
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(RedactingSpanExporter(memory)))
    with provider.get_tracer("t").start_as_current_span("chat") as span:
        span.set_attribute("gen_ai.input.messages", "use " + ENCODINGS[encoding](key))
        span.add_event("note", {"text": ENCODINGS[encoding](key)})
    (exported,) = memory.get_finished_spans()
    seen = json.dumps(dict(exported.attributes or {})) + json.dumps(
        [dict(e.attributes or {}) for e in exported.events]
    )
    assert all(secret_part(key) not in form for form in readable_forms(seen)), seen
