"""Provider wire formats shared by the SDK wrappers and the HTTP transport.

One job: turn a request body into a charged, notice-carrying request, and a
response (a JSON dict or an SDK object, whole or streamed) into recorded usage,
cost and mistakes. Three wire kinds are understood: OpenAI Chat Completions
(``chat``), OpenAI Responses (``responses``) and Anthropic Messages
(``anthropic``). Nothing here does I/O or imports a provider SDK; fields are
read with :func:`field`, which accepts dicts and attribute objects alike, so
the same parser serves ``httpx`` JSON bodies and ``openai``/``anthropic`` models.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field as dc_field
from typing import TYPE_CHECKING, Any, Literal

from budgetmix.adapters.base import Usage
from budgetmix.events import MistakeKind
from budgetmix.exceptions import ProviderError, ResponseFormatError

if TYPE_CHECKING:
    from budgetmix.adapters.pricing import Pricing
    from budgetmix.episode import Episode
    from budgetmix.steps import Turn

__all__ = [
    "AnthropicStreamAccumulator",
    "ChatStreamAccumulator",
    "ParsedResponse",
    "ResponsesStreamAccumulator",
    "TurnRequest",
    "WireKind",
    "WireToolCall",
    "as_format_error",
    "field",
    "neutral_usage",
    "parse_response",
    "tool_schemas",
    "validate_json",
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


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


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
def read_chat_usage(out: ParsedResponse, usage: Any) -> None:
    """Chat Completions ``usage``: cached tokens are part of ``prompt_tokens``."""
    out.input_tokens = _int(field(usage, "prompt_tokens"))
    out.output_tokens = _int(field(usage, "completion_tokens"))
    details = field(usage, "prompt_tokens_details")
    out.cache_read_tokens = _int(field(details, "cached_tokens")) or 0


def read_responses_usage(out: ParsedResponse, usage: Any) -> None:
    """Responses ``usage``: cached tokens are part of ``input_tokens``."""
    out.input_tokens = _int(field(usage, "input_tokens"))
    out.output_tokens = _int(field(usage, "output_tokens"))
    details = field(usage, "input_tokens_details")
    out.cache_read_tokens = _int(field(details, "cached_tokens")) or 0


def read_anthropic_usage(out: ParsedResponse, usage: Any) -> None:
    """Anthropic ``usage``: cache reads and writes come on top of ``input_tokens``; all
    three are input the model processed, so all count towards input tokens."""
    inp = _int(field(usage, "input_tokens"))
    out.cache_read_tokens = _int(field(usage, "cache_read_input_tokens")) or 0
    out.cache_write_tokens = _int(field(usage, "cache_creation_input_tokens")) or 0
    if inp is not None:
        inp += out.cache_read_tokens + out.cache_write_tokens
    out.input_tokens = inp
    out.output_tokens = _int(field(usage, "output_tokens"))


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


_USAGE_READERS = {
    "chat": read_chat_usage,
    "responses": read_responses_usage,
    "anthropic": read_anthropic_usage,
}


# -- whole responses -------------------------------------------------------------------
def parse_chat(obj: Any) -> ParsedResponse:
    """A Chat Completions response (``chat.completion``)."""
    out = ParsedResponse(model=field(obj, "model"))
    read_chat_usage(out, field(obj, "usage"))
    choices = field(obj, "choices", [])
    if not choices:
        out.empty = True
        return out
    for choice in choices:
        reason = field(choice, "finish_reason")
        if reason:
            out.finish_reasons.append(str(reason))
        message = field(choice, "message")
        content = field(message, "content")
        if isinstance(content, str):
            out.text += content
        for tc in field(message, "tool_calls", []):
            fn = field(tc, "function")
            out.tool_calls.append(
                WireToolCall(
                    field(tc, "id"), str(field(fn, "name", "")), field(fn, "arguments", "")
                )
            )
    out.truncated = "length" in out.finish_reasons
    return out


def parse_responses(obj: Any) -> ParsedResponse:
    """A Responses API response (``object: response``)."""
    out = ParsedResponse(model=field(obj, "model"))
    read_responses_usage(out, field(obj, "usage"))
    status = field(obj, "status")
    if status:
        out.finish_reasons.append(str(status))
    reason = field(field(obj, "incomplete_details"), "reason")
    out.truncated = reason == "max_output_tokens"
    items = field(obj, "output", [])
    out.empty = not items
    for item in items:
        kind = field(item, "type")
        if kind == "function_call":
            out.tool_calls.append(
                WireToolCall(
                    field(item, "call_id"),
                    str(field(item, "name", "")),
                    field(item, "arguments", ""),
                )
            )
        elif kind == "message":
            for part in field(item, "content", []):
                if field(part, "type") == "output_text":
                    out.text += str(field(part, "text", ""))
    return out


def parse_anthropic(obj: Any) -> ParsedResponse:
    """An Anthropic Messages response (``type: message``)."""
    out = ParsedResponse(model=field(obj, "model"))
    read_anthropic_usage(out, field(obj, "usage"))
    reason = field(obj, "stop_reason")
    if reason:
        out.finish_reasons.append(str(reason))
    out.truncated = reason == "max_tokens"
    blocks = field(obj, "content", [])
    out.empty = not blocks and reason != "end_turn"
    for block in blocks:
        kind = field(block, "type")
        if kind == "text":
            out.text += str(field(block, "text", ""))
        elif kind == "tool_use":
            raw = field(block, "input", {})
            out.tool_calls.append(
                WireToolCall(field(block, "id"), str(field(block, "name", "")), raw)
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
        self._calls: dict[tuple[int, int], list[Any]] = {}
        self._seen = False

    def feed(self, chunk: Any) -> None:
        """Fold one chunk in (called per streamed token: keep it lean)."""
        out = self.result
        if out.model is None:
            out.model = field(chunk, "model")
        usage = field(chunk, "usage")
        if usage is not None:
            read_chat_usage(out, usage)
        for choice in field(chunk, "choices", ()):
            self._seen = True
            delta = field(choice, "delta")
            content = field(delta, "content")
            if isinstance(content, str):
                self._text.append(content)
            reason = field(choice, "finish_reason")
            if reason:
                out.finish_reasons.append(str(reason))
            calls = field(delta, "tool_calls")
            if calls:
                self._fold_calls(field(choice, "index", 0), calls)

    def _fold_calls(self, idx: int, calls: Any) -> None:
        for tc in calls:
            slot = self._calls.setdefault((idx, field(tc, "index", 0)), [None, "", ""])
            fn = field(tc, "function")
            slot[0] = field(tc, "id", slot[0])
            slot[1] += field(fn, "name", "")
            slot[2] += field(fn, "arguments", "")

    def finish(self) -> ParsedResponse:
        """The folded response."""
        out = self.result
        out.text = "".join(self._text)
        out.tool_calls = [WireToolCall(cid, name, args) for cid, name, args in self._calls.values()]
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
        kind = field(event, "type")
        if kind in self._TERMINAL:
            self._final = field(event, "response")
        elif kind == "response.output_text.delta":
            self._text.append(str(field(event, "delta", "")))

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
            out.model = field(msg, "model")
            read_anthropic_usage(out, field(msg, "usage"))
        elif kind == "content_block_start":
            block = field(event, "content_block")
            self._blocks[field(event, "index", 0)] = [
                field(block, "type"),
                field(block, "id"),
                field(block, "name", ""),
                "",
            ]
        elif kind == "content_block_delta":
            delta = field(event, "delta")
            slot = self._blocks.get(field(event, "index", 0))
            dkind = field(delta, "type")
            if dkind == "text_delta":
                self._text.append(str(field(delta, "text", "")))
            elif dkind == "input_json_delta" and slot is not None:
                slot[3] += str(field(delta, "partial_json", ""))
        elif kind == "message_delta":
            reason = field(field(event, "delta"), "stop_reason")
            if reason:
                out.finish_reasons.append(str(reason))
            usage = field(event, "usage")
            tokens = _int(field(usage, "output_tokens"))
            if tokens is not None:
                out.output_tokens = tokens

    def finish(self) -> ParsedResponse:
        """The folded response."""
        out = self.result
        out.text = "".join(self._text)
        for kind, cid, name, args in self._blocks.values():
            if kind == "tool_use":
                out.tool_calls.append(WireToolCall(cid, str(name), args or "{}"))
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


def as_format_error(exc: ProviderError) -> ProviderError:
    """A final failure caused by an unusable body (not JSON, failed SDK validation)
    as :class:`ResponseFormatError`; any other failure unchanged."""
    cause = exc.__cause__
    if isinstance(exc, ResponseFormatError) or cause is None:
        return exc
    if isinstance(cause, ValueError) or type(cause).__name__.endswith("ResponseValidationError"):
        return ResponseFormatError(
            f"{type(cause).__name__}: the provider's response could not be read",
            status_code=exc.status_code,
        )
    return exc


# -- tool checks -----------------------------------------------------------------------
def tool_schemas(kind: WireKind, tools: Any) -> dict[str, Mapping[str, Any]] | None:
    """Declared function tools -> ``{name: JSON schema}``; ``None`` when the request
    declares no tools (then names are not checked) or uses hosted tools we can't see."""
    if not isinstance(tools, list | tuple) or not tools:
        return None
    out: dict[str, Mapping[str, Any]] = {}
    for tool in tools:
        if kind == "chat":
            fn = field(tool, "function")
            name, params = field(fn, "name"), field(fn, "parameters", {})
        elif kind == "responses":
            if field(tool, "type") != "function":
                return None
            name, params = field(tool, "name"), field(tool, "parameters", {})
        else:
            name, params = field(tool, "name"), field(tool, "input_schema", {})
        if isinstance(name, str):
            out[name] = params if isinstance(params, Mapping) else {}
    return out


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}


def _type_ok(value: Any, name: str) -> bool:
    py = _JSON_TYPES.get(name)
    if py is None:
        return True  # an unknown type keyword is not ours to reject
    if isinstance(value, bool) and name in ("integer", "number"):
        return False
    if name == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, py)


def validate_json(schema: Mapping[str, Any], value: Any, path: str = "$") -> str | None:
    """Check ``value`` against the common JSON-schema keywords tools use.

    Supports ``type``, ``enum``, ``const``, ``required``, ``properties``,
    ``additionalProperties``, ``items``, ``anyOf``/``oneOf``/``allOf``. Other keywords
    (``$ref``, formats, bounds) are accepted unchecked. Returns the first error or ``None``.
    """
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else list(types)
        if not any(_type_ok(value, t) for t in names):
            return f"{path}: expected {'/'.join(names)}, got {type(value).__name__}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{path}: {value!r} is not one of {schema['enum']!r}"
    if "const" in schema and value != schema["const"]:
        return f"{path}: expected {schema['const']!r}"
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if options and all(validate_json(s, value, path) is not None for s in options):
            return f"{path}: matches none of {key}"
    for sub in schema.get("allOf", ()):
        err = validate_json(sub, value, path)
        if err:
            return err
    if isinstance(value, dict):
        props: Mapping[str, Any] = schema.get("properties", {})
        for req in schema.get("required", ()):
            if req not in value:
                return f"{path}: missing required property {req!r}"
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            if key in props:
                err = validate_json(props[key], item, f"{path}.{key}")
                if err:
                    return err
            elif extra is False:
                return f"{path}: unexpected property {key!r}"
            elif isinstance(extra, Mapping):
                err = validate_json(extra, item, f"{path}.{key}")
                if err:
                    return err
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for i, item in enumerate(value):
            err = validate_json(schema["items"], item, f"{path}[{i}]")
            if err:
                return err
    return None


def tool_call_problem(
    call: WireToolCall, schemas: Mapping[str, Mapping[str, Any]] | None, *, truncated: bool
) -> tuple[MistakeKind, str] | None:
    """The mistake a tool call makes, if any: unknown name, unparsable or invalid arguments."""
    if schemas is not None and call.name not in schemas:
        return MistakeKind.UNKNOWN_TOOL, f"unknown tool {call.name!r}"
    args: Any = call.arguments
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError as exc:
            why = " (response truncated at the token limit)" if truncated else ""
            return MistakeKind.INVALID_TOOL_ARGUMENTS, f"arguments are not valid JSON{why}: {exc}"
    if not isinstance(args, Mapping):
        return MistakeKind.INVALID_TOOL_ARGUMENTS, "arguments are not a JSON object"
    schema = schemas.get(call.name) if schemas is not None else None
    if schema:
        err = validate_json(schema, dict(args))
        if err:
            return MistakeKind.INVALID_TOOL_ARGUMENTS, err
    return None


# -- one budgeted request --------------------------------------------------------------
def _latest_tool_results(kind: WireKind, body: Mapping[str, Any]) -> list[tuple[Any, bool, str]]:
    """``(call id, ok, detail)`` for each tool result after the request's last model
    output: the answers to the previous response's tool calls. Only Anthropic marks
    failures (``is_error``); OpenAI results count as successes unless that call's
    outcome is already known (an invalid call recorded as a mistake on arrival)."""
    out: list[tuple[Any, bool, str]] = []
    if kind == "responses":
        items = body.get("input")
        for item in reversed(items if isinstance(items, list | tuple) else ()):
            kind_ = field(item, "type")
            if kind_ == "function_call" or field(item, "role") == "assistant":
                break
            if kind_ == "function_call_output":
                out.append((field(item, "call_id"), True, ""))
        return out
    messages = body.get("messages")
    for message in reversed(messages if isinstance(messages, list | tuple) else ()):
        role = field(message, "role")
        if role == "assistant":
            break
        if kind == "chat":
            if role == "tool":
                out.append((field(message, "tool_call_id"), True, ""))
            continue
        content = field(message, "content")
        blocks: list[Any] = content if isinstance(content, list) else []
        for block in reversed(blocks):
            if field(block, "type") == "tool_result":
                failed = bool(field(block, "is_error", False))
                text = field(block, "content", "") if failed else ""
                out.append(
                    (field(block, "tool_use_id"), not failed, str(text)[:300] if text else "")
                )
    return out


def _record_tool_results(episode: Episode, kind: WireKind, body: Mapping[str, Any]) -> None:
    for call_id, ok, detail in reversed(_latest_tool_results(kind, body)):
        if isinstance(call_id, str) and call_id:
            episode.record_tool_result(call_id, ok=ok, detail=detail)


_SCALARS = (str, int, float, bool, type(None))


def _plain_json(value: Any) -> bool:
    """True when ``value`` is made only of dicts with str keys, lists and JSON scalars."""
    if isinstance(value, _SCALARS):
        return True
    if type(value) is dict:
        return all(type(k) is str and _plain_json(v) for k, v in value.items())
    if type(value) is list:
        return all(_plain_json(v) for v in value)
    return False


class TurnRequest:
    """One budgeted request: checks the price, records request-side mistakes, charges
    the turn, and builds the body to send (notice injected, tools off on a grace turn).

    Raises (from the constructor):
        ConfigError: the episode has a cost limit and the model has no known price.
        BudgetExhausted / EarlyStopped: the turn was refused; nothing may be sent.
    """

    __slots__ = ("_original", "body", "episode", "kind", "model", "pricing", "schemas", "turn")

    def __init__(
        self, episode: Episode, kind: WireKind, body: Mapping[str, Any], pricing: Pricing
    ) -> None:
        model = body.get("model")
        self.model = model if isinstance(model, str) else None
        if episode.ledger.limit("cost_usd") is not None:
            pricing.require(self.model)
        _record_tool_results(episode, kind, body)  # before the turn: they answer the last one
        self.episode = episode
        self.kind: WireKind = kind
        self.pricing = pricing
        self.schemas = tool_schemas(kind, body.get("tools"))
        self.turn: Turn = episode.begin_turn(model=self.model)
        self._original = body
        self.body = self._inject(dict(body))

    def _inject(self, body: dict[str, Any]) -> dict[str, Any]:
        turn, kind = self.turn, self.kind
        if kind == "chat":
            body["messages"] = turn.openai_chat(list(body.get("messages") or []))
        elif kind == "responses":
            raw = body.get("input")
            body["input"] = turn.openai_responses(raw if isinstance(raw, str) else list(raw or []))
        else:
            body["messages"] = turn.anthropic(list(body.get("messages") or []))
        if turn.grace and body.get("tools"):
            # tools stay declared (prompt cache) but the wrap-up turn may not call them
            body["tool_choice"] = {"type": "none"} if kind == "anthropic" else "none"
        return body

    def sdk_kwargs(self, **overrides: Any) -> dict[str, Any]:
        """Keyword arguments for the provider SDK's ``create``: :attr:`body` plus ``overrides``.

        The SDKs (Stainless-generated) transform every message against a union of
        TypedDicts, about 0.1 ms per message on a laptop, a cost the caller already
        pays for their own messages. When the caller's history is plain JSON data,
        for which that transform is the identity, the SDK gets the caller's list as
        before and the list with the notice rides in ``extra_body`` (documented to
        replace top-level keys of the JSON body), so the bytes sent are the same
        and the notice adds no transform. Anything else (pydantic objects,
        generators, file handles) takes the SDK's own path.
        """
        key = "input" if self.kind == "responses" else "messages"
        kwargs = {**self.body, **overrides}
        original, extra = self._original.get(key), self._original.get("extra_body")
        if (
            isinstance(original, list)
            and (extra is None or (isinstance(extra, dict) and key not in extra))
            and _plain_json(original)
        ):
            kwargs["extra_body"] = {**(extra or {}), key: kwargs[key]}
            kwargs[key] = original
        return kwargs

    def accumulator(self) -> Accumulator:
        """A stream accumulator for this request's wire kind."""
        return accumulator(self.kind)

    def finish(self, parsed: ParsedResponse) -> None:
        """Record usage, cost, finish reasons and the response's mistakes on the turn."""
        turn, ep = self.turn, self.episode
        model = parsed.model or self.model
        if parsed.input_tokens is None and parsed.output_tokens is None:
            turn.add_event(EVENT_USAGE_MISSING, {"budgetmix.wire": self.kind})
        inp, out = parsed.input_tokens or 0, parsed.output_tokens or 0
        read, write = parsed.cache_read_tokens, parsed.cache_write_tokens
        cost = self.pricing.cost(model, inp, out, cache_read=read, cache_write=write) or 0.0
        turn.usage(
            input_tokens=inp,
            output_tokens=out,
            cost_usd=cost,
            response_model=parsed.model,
            finish_reasons=parsed.finish_reasons or None,
            cache_read_tokens=read,
            cache_write_tokens=write,
        )
        if parsed.truncated:
            turn.add_event(EVENT_TRUNCATED, {"budgetmix.wire": self.kind})
        if parsed.empty:
            ep.record_mistake(MistakeKind.MODEL_FORMAT_ERROR, detail="response has no output")
        for call in parsed.tool_calls:
            problem = tool_call_problem(call, self.schemas, truncated=parsed.truncated)
            if problem is not None:
                ep.record_mistake(problem[0], tool=call.name, call_id=call.id, detail=problem[1])
        message: dict[str, Any] = {"role": "assistant", "content": parsed.text}
        if parsed.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "name": c.name, "arguments": c.arguments} for c in parsed.tool_calls
            ]
        ep.record_message(message)
        turn.record_content(
            input_messages=self.body.get("messages", self.body.get("input")),
            output_messages=[message],
        )
