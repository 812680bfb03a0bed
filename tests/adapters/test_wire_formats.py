"""adapters/_wire: one declared interface (WireFormat), one registry (FORMATS).

Every registered format reads back, whole and streamed, the final answer it writes,
declares the tools its writer writes, and the module-level dispatch goes through the
registry (a format replaced there is the one used).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, get_args

import pytest
from budgetmix.adapters import _wire
from budgetmix.adapters._sse import EventStreamDecoder
from budgetmix.adapters._wire import FORMATS, WireFormat, WireKind, anthropic, chat, responses
from budgetmix.adapters.base import ToolSpec

NEUTRAL = {"stop", "tool_calls", "length", "error"}


def test_the_registry_lists_each_format_module_once_by_its_name() -> None:
    assert set(FORMATS) == set(get_args(WireKind))
    for module in (chat, responses, anthropic):
        fmt = module.FORMAT
        assert isinstance(fmt, WireFormat)
        assert FORMATS[fmt.name] is fmt
        assert fmt.read is module.read and fmt.stream_reader is module.StreamReader


@pytest.mark.parametrize("kind", sorted(FORMATS))
def test_a_format_reads_back_its_terminal_body_whole_and_streamed(kind: WireKind) -> None:
    fmt = FORMATS[kind]
    whole = fmt.read(fmt.terminal_body("m-1", "all done"))
    assert (whole.text, whole.model, whole.empty) == ("all done", "m-1", False)
    assert whole.tool_calls == []
    assert [fmt.finish.get(r) for r in whole.finish_reasons] == ["stop"]
    reader = fmt.stream_reader()
    decoder = EventStreamDecoder(1 << 20, 1 << 20)
    for data in decoder.feed(fmt.terminal_stream("m-1", "all done")):
        if data != b"[DONE]":
            reader.feed(json.loads(data))
    streamed = reader.finish()
    assert (streamed.text, streamed.model, streamed.empty) == ("all done", "m-1", False)
    assert set(fmt.finish.values()) <= NEUTRAL


@pytest.mark.parametrize("kind", [k for k, f in sorted(FORMATS.items()) if f.write_tools])
def test_a_format_declares_the_tools_its_writer_writes(kind: WireKind) -> None:
    fmt = FORMATS[kind]
    assert fmt.write_tools is not None and fmt.write_messages is not None
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    (tool,) = fmt.write_tools([ToolSpec(name="look", description="d", parameters=schema)])
    assert fmt.declared_tool(tool) == ("look", schema)


def test_dispatch_goes_through_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    def body(model: str, text: str) -> dict[str, Any]:
        return {"replaced": text}

    replaced = dataclasses.replace(FORMATS["chat"], terminal_body=body)
    monkeypatch.setitem(_wire.FORMATS, "chat", replaced)  # type: ignore[index]
    assert _wire.terminal_body("chat", "m", "x") == {"replaced": "x"}
    assert _wire.history_key("responses") == "input"
    assert _wire.history_key("anthropic") == "messages"
