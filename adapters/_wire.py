"""Provider wire formats shared by the SDK wrappers and the HTTP transport.

One job: read a response (a JSON dict or an SDK object, whole or streamed) into
the parts the budget needs (usage, finish reasons, text, tool calls); the
request side is :mod:`budgetmix.adapters._turn`. Three wire kinds are
understood: OpenAI Chat Completions (``chat``), OpenAI Responses
(``responses``) and Anthropic Messages (``anthropic``). Nothing here does I/O
or imports a provider SDK; fields are read with :func:`field`, which accepts
dicts and attribute objects alike, so the same parser serves ``httpx`` JSON
bodies and ``openai``/``anthropic`` models.
"""

from __future__ import annotations

import json
import reprlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from dataclasses import field as dc_field
from functools import partial
from typing import Any, Literal

from budgetmix.adapters.base import Usage

__all__ = [
    "AnthropicStreamAccumulator",
    "ChatStreamAccumulator",
    "ParsedResponse",
    "ResponsesStreamAccumulator",
    "WireKind",
    "WireToolCall",
    "as_seq",
    "as_str",
    "as_text",
    "dumps_bounded",
    "field",
    "neutral_usage",
    "parse_response",
    "repr_bounded",
]

WireKind = Literal["chat", "responses", "anthropic"]
EVENT_USAGE_MISSING = "budgetmix.usage_missing"
EVENT_TRUNCATED = "budgetmix.response_truncated"


def field(obj: Any, key: str, default: Any = None) -> Any:
    """``obj[key]`` for mappings, ``obj.key`` otherwise; ``default`` when absent or None."""
    if obj is None:
        return default
    kind = type(obj)
    # JSON bodies are exact dicts; SDK models are remembered, as the Mapping ABC check is slow
    if kind is dict:
        value = obj.get(key)
    elif kind in _ATTRIBUTE_TYPES:
        value = getattr(obj, key, None)
    elif isinstance(obj, Mapping):
        value = obj.get(key)
    else:
        _ATTRIBUTE_TYPES.add(kind)
        value = getattr(obj, key, None)
    return default if value is None else value


_ATTRIBUTE_TYPES: set[type] = set()  # types read by attribute (bounded by the SDKs' models)

Reader = Callable[[Any, str, Any], Any]


def _read_none(obj: Any, key: str, default: Any = None) -> Any:
    return None


def _read_mapping(obj: Any, key: str, default: Any = None) -> Any:
    return obj.get(key)


def reader(obj: Any) -> Reader:
    """How to read ``obj``'s fields, chosen once per object: ``dict.get`` for JSON dicts,
    ``getattr`` for SDK models (both C functions; call as ``get(obj, key, None)``).
    Like :func:`field`, an absent field and a ``None`` one both read as ``None``."""
    kind = type(obj)
    if kind is dict:
        return dict.get
    if kind in _ATTRIBUTE_TYPES:
        return getattr
    if obj is None:
        return _read_none
    if isinstance(obj, Mapping):
        return _read_mapping
    _ATTRIBUTE_TYPES.add(kind)
    return getattr


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother = 3, 60, 60

SEQUENCES = (list, tuple)  # a tuple, not list | tuple: that builds a union per call


def _seq(value: Any) -> Any:
    """``value`` if it is a list (or tuple), else nothing to iterate: malformed bodies
    must not crash the parser."""
    return value if isinstance(value, SEQUENCES) else ()


def _text(value: Any) -> str:
    """A string field; anything else is no text (never ``str()`` of a hostile value,
    which may be huge or nest too deep to print)."""
    return value if isinstance(value, str) else ""


def _arguments(args: Any) -> Any:
    """A call's ``arguments``: as sent when a string or a mapping (the checks read both),
    else a bounded ``repr`` of it, which is no JSON object (an ``invalid_tool_arguments``
    mistake) and keeps a hostile value out of the transcript."""
    return args if isinstance(args, (str, Mapping)) else repr_bounded(args)


def repr_bounded(value: Any, size: int = 80) -> str:
    """``repr(value)`` cut to ``size`` characters, safe for values of any depth or size."""
    return _REPR.repr(value)[:size]


def dumps_bounded(value: Any) -> str:
    """``value`` as JSON text; when it cannot be (not JSON, nested too deep), a bounded
    ``repr``, which is not JSON either: a tool call's arguments stay unreadable."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        return repr_bounded(value)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None  # a malformed model name is no name


def _int(value: Any) -> int | None:
    """A token count or index: a non-negative int (below 2**53, so it prices as a float),
    else ``None`` (not reported)."""
    if type(value) is not int:  # JSON and SDK counts are exact ints: one check
        if not isinstance(value, int) or isinstance(value, bool):
            return None
        value = int(value)  # an int subclass (an enum, say) counts as its value
    return value if 0 <= value < _MAX_COUNT else None


_MAX_COUNT = 2**53

# for the other readers of the SDKs' unvalidated models (the built-in loop's models)
as_seq, as_str, as_text = _seq, _str, _text


@dataclass(slots=True)
class WireToolCall:
    """A tool call in a response; ``arguments`` is JSON text (OpenAI) or an object (Anthropic)."""

    id: str | None
    name: str
    arguments: str | Mapping[str, Any]


@dataclass(slots=True)
class ParsedResponse:
    """The parts of a response the budget cares about. Token counts are ``None``
    when the provider did not report usage."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int = 0  # of input_tokens: served from the provider's prompt cache
    cache_write_tokens: int = 0  # of input_tokens: written to it
    model: str | None = None
    finish_reasons: list[str] = dc_field(default_factory=list)
    tool_calls: list[WireToolCall] = dc_field(default_factory=list)
    text: str = ""
    empty: bool = False
    truncated: bool = False


# -- usage -----------------------------------------------------------------------------
#: OpenAI ``usage`` field names: (input, output, input details) for Chat Completions
#: and for Responses; cached tokens are part of the input count in both.
_CHAT_USAGE = ("prompt_tokens", "completion_tokens", "prompt_tokens_details")
_RESPONSES_USAGE = ("input_tokens", "output_tokens", "input_tokens_details")


def read_openai_usage(
    out: ParsedResponse, usage: Any, names: tuple[str, str, str] = _CHAT_USAGE
) -> None:
    """OpenAI ``usage`` (Chat Completions by default, Responses with ``_RESPONSES_USAGE``)."""
    if usage is None:
        return
    get = reader(usage)
    inp, outp, details_name = names
    out.input_tokens = _int(get(usage, inp, None))
    out.output_tokens = _int(get(usage, outp, None))
    details = get(usage, details_name, None)
    if details is not None:
        out.cache_read_tokens = _int(field(details, "cached_tokens")) or 0


def read_anthropic_usage(out: ParsedResponse, usage: Any) -> None:
    """Anthropic ``usage``: cache reads and writes come on top of ``input_tokens``; all
    three are input the model processed, so all count towards input tokens."""
    if usage is None:
        return
    get = reader(usage)
    inp = _int(get(usage, "input_tokens", None))
    out.cache_read_tokens = _int(get(usage, "cache_read_input_tokens", None)) or 0
    out.cache_write_tokens = _int(get(usage, "cache_creation_input_tokens", None)) or 0
    if inp is not None:
        inp += out.cache_read_tokens + out.cache_write_tokens
        if inp >= _MAX_COUNT:  # three valid counts, one impossible total: not reported
            inp = None
    out.input_tokens = inp
    out.output_tokens = _int(get(usage, "output_tokens", None))


def neutral_usage(kind: WireKind, usage: Any) -> Usage | None:
    """A provider's ``usage`` object -> :class:`~budgetmix.adapters.base.Usage`
    (``None`` when the response reported none)."""
    if usage is None:
        return None
    out = ParsedResponse()
    _USAGE_READERS[kind](out, usage)
    return Usage(
        out.input_tokens or 0, out.output_tokens or 0, out.cache_read_tokens, out.cache_write_tokens
    )


_USAGE_READERS: dict[str, Callable[[ParsedResponse, Any], None]] = {
    "chat": read_openai_usage,
    "responses": partial(read_openai_usage, names=_RESPONSES_USAGE),
    "anthropic": read_anthropic_usage,
}


# -- whole responses -------------------------------------------------------------------
def parse_chat(obj: Any) -> ParsedResponse:
    """A Chat Completions response (``chat.completion``)."""
    get = reader(obj)
    out = ParsedResponse(model=_str(get(obj, "model", None)))
    read_openai_usage(out, get(obj, "usage", None))
    choices = _seq(get(obj, "choices", None))
    if not choices:
        out.empty = True
        return out
    for choice in choices:
        get = reader(choice)
        reason = get(choice, "finish_reason", None)
        if reason and isinstance(reason, str):
            out.finish_reasons.append(reason)
        message = get(choice, "message", None)
        get = reader(message)
        content = get(message, "content", None)
        if isinstance(content, str):
            out.text += content
        for tc in _seq(get(message, "tool_calls", None)):
            fn = field(tc, "function")
            out.tool_calls.append(
                WireToolCall(
                    _str(field(tc, "id")),
                    _text(field(fn, "name")),
                    _arguments(field(fn, "arguments", "")),
                )
            )
    out.truncated = "length" in out.finish_reasons
    return out


def parse_responses(obj: Any) -> ParsedResponse:
    """A Responses API response (``object: response``)."""
    out = ParsedResponse(model=_str(field(obj, "model")))
    read_openai_usage(out, field(obj, "usage"), _RESPONSES_USAGE)
    status = field(obj, "status")
    if status and isinstance(status, str):
        out.finish_reasons.append(status)
    reason = field(field(obj, "incomplete_details"), "reason")
    out.truncated = reason == "max_output_tokens"
    items = _seq(field(obj, "output"))
    out.empty = not items
    for item in items:
        kind = field(item, "type")
        if kind == "function_call":
            out.tool_calls.append(
                WireToolCall(
                    _str(field(item, "call_id")),
                    _text(field(item, "name")),
                    _arguments(field(item, "arguments", "")),
                )
            )
        elif kind == "message":
            for part in _seq(field(item, "content")):
                if field(part, "type") == "output_text":
                    out.text += _text(field(part, "text"))
    return out


def parse_anthropic(obj: Any) -> ParsedResponse:
    """An Anthropic Messages response (``type: message``)."""
    out = ParsedResponse(model=_str(field(obj, "model")))
    read_anthropic_usage(out, field(obj, "usage"))
    reason = field(obj, "stop_reason")
    if reason and isinstance(reason, str):
        out.finish_reasons.append(reason)
    out.truncated = reason == "max_tokens"
    blocks = _seq(field(obj, "content"))
    out.empty = not blocks and reason != "end_turn"
    for block in blocks:
        kind = field(block, "type")
        if kind == "text":
            out.text += _text(field(block, "text"))
        elif kind == "tool_use":
            raw = _arguments(field(block, "input", {}))
            out.tool_calls.append(
                WireToolCall(_str(field(block, "id")), _text(field(block, "name")), raw)
            )
    return out


_PARSERS = {"chat": parse_chat, "responses": parse_responses, "anthropic": parse_anthropic}


def parse_response(kind: WireKind, obj: Any) -> ParsedResponse:
    """Parse a whole (non-streamed) response of ``kind``."""
    return _PARSERS[kind](obj)


# -- streams ---------------------------------------------------------------------------
class ChatStreamAccumulator:
    """Folds ``chat.completion.chunk`` objects; usage comes with the final chunk when the
    request asked for ``stream_options.include_usage``."""

    def __init__(self) -> None:
        self.result = ParsedResponse()
        self._text: list[str] = []  # joined once at the end (no quadratic concatenation)
        # (choice, call) -> [id, name parts, argument parts]: joined once, at the end
        self._calls: dict[tuple[int, int], list[Any]] = {}
        self._seen = False

    def feed(self, chunk: Any) -> None:
        """Fold one chunk in (called per streamed token: keep it lean)."""
        out = self.result
        get = reader(chunk)  # one reader per object: C-level reads of dicts and SDK models
        if out.model is None:
            out.model = _str(get(chunk, "model", None))
        usage = get(chunk, "usage", None)
        if usage is not None:
            read_openai_usage(out, usage)
        for choice in _seq(get(chunk, "choices", None)):
            self._seen = True
            get = reader(choice)
            delta = get(choice, "delta", None)
            reason = get(choice, "finish_reason", None)
            if reason and isinstance(reason, str):
                out.finish_reasons.append(reason)
            index = _int(get(choice, "index", None)) or 0
            get = reader(delta)
            content = get(delta, "content", None)
            if isinstance(content, str):
                self._text.append(content)
            calls = get(delta, "tool_calls", None)
            if calls:
                self._fold_calls(index, _seq(calls))

    def _fold_calls(self, idx: int, calls: Any) -> None:
        for tc in calls:
            key = (idx, _int(field(tc, "index")) or 0)
            slot = self._calls.get(key)
            if slot is None:
                slot = self._calls[key] = [None, [], []]
            fn = field(tc, "function")
            slot[0] = _str(field(tc, "id")) or slot[0]
            slot[1].append(_text(field(fn, "name")))
            slot[2].append(_text(field(fn, "arguments")))

    def finish(self) -> ParsedResponse:
        """The folded response."""
        out = self.result
        out.text = "".join(self._text)
        out.tool_calls = [
            WireToolCall(cid, "".join(name), "".join(args))
            for cid, name, args in self._calls.values()
        ]
        out.empty = not self._seen
        out.truncated = "length" in out.finish_reasons
        return out


class ResponsesStreamAccumulator:
    """Folds Responses streaming events; the terminal ``response.completed`` (or
    ``.incomplete`` / ``.failed``) event carries the whole response with usage."""

    _TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})

    def __init__(self) -> None:
        self._final: Any = None
        self._text: list[str] = []

    def feed(self, event: Any) -> None:
        """Fold one event in."""
        kind = _str(field(event, "type"))
        if kind in self._TERMINAL:
            self._final = field(event, "response")
        elif kind == "response.output_text.delta":
            self._text.append(_text(field(event, "delta")))

    def finish(self) -> ParsedResponse:
        """The folded response (from the terminal event when one arrived)."""
        if self._final is not None:
            return parse_responses(self._final)
        return ParsedResponse(text="".join(self._text), empty=not self._text)


class AnthropicStreamAccumulator:
    """Folds Anthropic Messages streaming events (``message_start`` carries the input
    usage, ``message_delta`` the stop reason and output usage)."""

    def __init__(self) -> None:
        self.result = ParsedResponse()
        self._text: list[str] = []
        self._blocks: dict[int, list[Any]] = {}
        self._started = False

    def feed(self, event: Any) -> None:
        """Fold one event in."""
        out = self.result
        kind = field(event, "type")
        if kind == "message_start":
            self._started = True
            msg = field(event, "message")
            out.model = _str(field(msg, "model"))
            read_anthropic_usage(out, field(msg, "usage"))
        elif kind == "content_block_start":
            block = field(event, "content_block")
            self._blocks[_int(field(event, "index")) or 0] = [
                field(block, "type"),
                _str(field(block, "id")),
                _text(field(block, "name")),
                [],  # the input's JSON parts: joined once, at the end
            ]
        elif kind == "content_block_delta":
            delta = field(event, "delta")
            slot = self._blocks.get(_int(field(event, "index")) or 0)
            dkind = field(delta, "type")
            if dkind == "text_delta":
                self._text.append(_text(field(delta, "text")))
            elif dkind == "input_json_delta" and slot is not None:
                slot[3].append(_text(field(delta, "partial_json")))
        elif kind == "message_delta":
            reason = field(field(event, "delta"), "stop_reason")
            if reason and isinstance(reason, str):
                out.finish_reasons.append(reason)
            usage = field(event, "usage")
            tokens = _int(field(usage, "output_tokens"))
            if tokens is not None:
                out.output_tokens = tokens

    def finish(self) -> ParsedResponse:
        """The folded response."""
        out = self.result
        out.text = "".join(self._text)
        for kind, cid, name, parts in self._blocks.values():
            if kind == "tool_use":
                out.tool_calls.append(WireToolCall(cid, name, "".join(parts) or "{}"))
        out.empty = not self._started
        out.truncated = "max_tokens" in out.finish_reasons
        return out


Accumulator = ChatStreamAccumulator | ResponsesStreamAccumulator | AnthropicStreamAccumulator


def accumulator(kind: WireKind) -> Accumulator:
    """A fresh stream accumulator for ``kind``."""
    if kind == "chat":
        return ChatStreamAccumulator()
    if kind == "responses":
        return ResponsesStreamAccumulator()
    return AnthropicStreamAccumulator()
