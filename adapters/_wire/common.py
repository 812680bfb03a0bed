"""What every wire format's reader shares: reading untrusted provider objects field by
field, and the parsed response the budget records.

Fields are read with :func:`field` (or a :func:`reader` chosen once per object), which
accepts dicts and attribute objects alike, so one reader serves ``httpx`` JSON bodies
and the ``openai``/``anthropic`` SDKs' models, which are built without validation: a
field of the wrong type reads as absent, never as a crash.
"""

from __future__ import annotations

import json
import re
import reprlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from dataclasses import field as dc_field
from typing import Any, NamedTuple

from budgetmix.adapters.base import ModelResponse, ToolCallRequest, Usage

__all__ = [
    "MAX_COUNT",
    "SEQUENCES",
    "ParsedResponse",
    "ToolResult",
    "as_count",
    "as_seq",
    "as_str",
    "as_text",
    "dumps_bounded",
    "field",
    "invalid_usage_estimate",
    "neutral_response",
    "reader",
    "reads_as_error",
    "repr_bounded",
    "result_text",
    "sse_event",
    "tool_result",
    "usage_count",
]


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


def as_seq(value: Any) -> Any:
    """``value`` if it is a list (or tuple), else nothing to iterate: malformed bodies
    must not crash the reader."""
    return value if isinstance(value, SEQUENCES) else ()


def as_text(value: Any) -> str:
    """A string field; anything else is no text (never ``str()`` of a hostile value,
    which may be huge or nest too deep to print)."""
    return value if isinstance(value, str) else ""


def as_str(value: Any) -> str | None:
    """A string field, or ``None`` (a malformed model name is no name)."""
    return value if isinstance(value, str) else None


MAX_COUNT = 2**53


def as_count(value: Any) -> int | None:
    """A token count or index: a non-negative int (below 2**53, so it prices as a float),
    else ``None`` (not reported)."""
    if type(value) is not int:  # JSON and SDK counts are exact ints: one check
        if not isinstance(value, int) or isinstance(value, bool):
            return None
        value = int(value)  # an int subclass (an enum, say) counts as its value
    return value if 0 <= value < MAX_COUNT else None


def usage_count(out: ParsedResponse, name: str, value: Any) -> int | None:
    """A usage field as a count (``None``: not reported). A value that is there but is
    no count (NaN, an infinity, negative, a fraction, a bool, a string, 2**53 or more)
    is noted in ``out.usage_invalid`` and counts as not reported."""
    if value is None:
        return None
    count = as_count(value)
    if count is None:
        out.usage_invalid.append(f"{name}={repr_bounded(value, 40)}")
    return count


def invalid_usage_estimate(
    parsed: ParsedResponse, request: Mapping[str, Any]
) -> tuple[int | None, int | None]:
    """For a response whose usage held a value that is no count: the input and output
    tokens to charge, each the provider's where it gave a count, else estimated from the
    text (:func:`~budgetmix.accounting.estimate_tokens`: the request's JSON, the
    response's text and tool-call arguments), so that a token budget still binds."""
    from budgetmix.accounting import estimate_tokens

    inp, out = parsed.input_tokens, parsed.output_tokens
    if inp is None:
        try:
            inp = estimate_tokens(len(json.dumps(request, ensure_ascii=False, default=str)))
        except (TypeError, ValueError, RecursionError):
            inp = estimate_tokens(len(repr_bounded(request, 10_000)))
    if out is None:
        sent = len(parsed.text) + sum(len(call.arguments) for call in parsed.tool_calls)
        out = estimate_tokens(sent)
    return inp, out


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


@dataclass(slots=True)
class ParsedResponse:
    """A response as its wire format's reader found it. Token counts are ``None`` when
    the provider did not report them (``usage_reported``: it sent a usage object).

    ``tool_calls[i]`` is call ``i`` as the built-in loop sees it (arguments as JSON text);
    ``call_arguments[i]`` its arguments as the provider sent them (text, or the object
    Anthropic sends), which the budget checks and records."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int = 0  # of input_tokens: served from the provider's prompt cache
    cache_write_tokens: int = 0  # of input_tokens: written to it
    usage_reported: bool = False
    #: Usage fields the provider sent that are no count (``"name=value"``).
    usage_invalid: list[str] = dc_field(default_factory=list)
    model: str | None = None
    finish_reasons: list[str] = dc_field(default_factory=list)
    tool_calls: list[ToolCallRequest] = dc_field(default_factory=list)
    call_arguments: list[str | Mapping[str, Any]] = dc_field(default_factory=list)
    text: str = ""
    empty: bool = False
    truncated: bool = False
    response_id: str | None = None  # the provider's id of the response (gen_ai.response.id)

    def add_call(self, call_id: Any, name: Any, arguments: Any) -> None:
        """Add a call read from the wire: ``call_id`` and ``name`` count when they are
        strings; ``arguments`` is kept as sent when text or a mapping (the checks read
        both), else as a bounded ``repr``, which is no JSON object (an
        ``invalid_tool_arguments`` mistake) and keeps a hostile value out of the records."""
        text = arguments if isinstance(arguments, str) else dumps_bounded(arguments)
        self.tool_calls.append(
            ToolCallRequest(id=as_text(call_id), name=as_text(name), arguments=text)
        )
        sent = arguments if isinstance(arguments, (str, Mapping)) else repr_bounded(arguments)
        self.call_arguments.append(sent)

    def usage(self) -> Usage | None:
        """The neutral :class:`Usage` (``None`` when the response reported none)."""
        if not self.usage_reported:
            return None
        return Usage(
            self.input_tokens or 0,
            self.output_tokens or 0,
            self.cache_read_tokens,
            self.cache_write_tokens,
        )


def neutral_response(parsed: ParsedResponse, finish: Mapping[str, str], raw: Any) -> ModelResponse:
    """``parsed`` as the built-in loop's :class:`ModelResponse`: its first finish reason in
    neutral words (``finish``: the wire's table; anything else is ``stop``, and ``stop``
    with tool calls is ``tool_calls``)."""
    first = parsed.finish_reasons[0] if parsed.finish_reasons else None
    reason = finish.get(first, "stop") if first is not None else "stop"
    if parsed.tool_calls and reason == "stop":
        reason = "tool_calls"
    return ModelResponse(
        text=parsed.text,
        tool_calls=tuple(parsed.tool_calls),
        finish_reason=reason,
        usage=parsed.usage(),
        model=parsed.model,
        raw=raw,
    )


def sse_event(event: str | None, data: Any) -> bytes:
    """One server-sent event: an ``event:`` line when named, ``data`` as compact JSON (a
    string as it is, for ``[DONE]``), and the empty line that ends it."""
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


class ToolResult(NamedTuple):
    """A tool result a request carries: the call it answers, whether it failed (flagged,
    or :func:`reads_as_error`), the error text (bounded, only when it failed) and the
    content as sent (for opt-in content capture)."""

    call_id: Any
    ok: bool
    detail: str
    content: Any


#: How frameworks word a failed tool in its result when the wire has no error flag: the
#: OpenAI Agents SDK ("An error occurred while running the tool..."), LangGraph's ToolNode
#: ("Error: ..."), Pydantic AI's retry prompt ("... Fix the errors and try again."), a
#: Python traceback. Anchored at the start (or that one ending), so a result that merely
#: mentions an error is a success.
_ERROR_TEXT = re.compile(
    r"\A\s*(?:error\b|an error occurred|exception\b|traceback \(most recent call last\))"
    r"|fix the errors and try again\.?\s*\Z",
    re.IGNORECASE,
)


def result_text(content: Any) -> str:
    """A tool result's text: a string, or the text parts of a list of content parts."""
    if isinstance(content, str):
        return content
    parts = [field(p, "text") for p in as_seq(content)]
    return "".join(p for p in parts if isinstance(p, str))


def reads_as_error(text: str) -> bool:
    """Whether a tool result's text is worded as a failure (see :data:`_ERROR_TEXT`)."""
    return bool(text) and _ERROR_TEXT.search(text[:4096]) is not None


def tool_result(call_id: Any, content: Any, *, is_error: bool = False) -> ToolResult:
    """The :class:`ToolResult` for a result with this ``content`` (``is_error``: flagged)."""
    text = result_text(content)
    failed = is_error or reads_as_error(text)
    return ToolResult(call_id, not failed, text[:300] if failed else "", content)
