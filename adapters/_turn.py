"""One budgeted request, shared by the SDK wrappers and the HTTP transport.

:class:`TurnRequest` checks the price, records the outcomes of the tool calls the
request answers, charges the turn, and builds the body to send (notice injected,
tools off on a grace turn); :meth:`TurnRequest.finish` records the response's
usage, cost and mistakes.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from budgetmix import semconv as sc
from budgetmix.adapters._placement import place_observation_notice
from budgetmix.adapters._server import describe_turn
from budgetmix.adapters._tool_checks import tool_call_problem, tool_schemas
from budgetmix.adapters._tool_spans import calls_received, results_sent
from budgetmix.adapters._wire import (
    Accumulator,
    ParsedResponse,
    WireKind,
    accumulator,
    history_key,
)
from budgetmix.adapters._wire.common import SEQUENCES, invalid_usage_estimate
from budgetmix.events import MistakeKind
from budgetmix.exceptions import ConfigError
from budgetmix.genai_content import finish_reason
from budgetmix.policy import notice_placement

if TYPE_CHECKING:
    from budgetmix.adapters.pricing import Pricing
    from budgetmix.episode import Episode
    from budgetmix.steps import Turn

__all__ = ["MAX_REQUEST_DEPTH", "TurnRequest", "plain_json", "request_problem", "send_as_is"]

_log = logging.getLogger(__name__)


_LEAVES = frozenset({str, int, float, bool, type(None)})
_SCALARS = (str, int, float, bool)
_NESTED = (dict, list, tuple)
#: A request nesting deeper is refused before the charge: JSON encoders recurse once per
#: level and fail near Python's recursion limit (1000) with the caller's frames counted.
MAX_REQUEST_DEPTH = 512
# what _scan finds
_PLAIN, _OTHER, _UNSENDABLE = 0, 1, 2


def plain_json(messages: list[Any]) -> bool:
    """True when ``messages`` is made only of dicts with str keys, lists and JSON scalars.

    It runs over the whole history every turn: one pass, level by level, that ends at
    strings (most values) and at the first value that is not JSON; about 0.3 us per
    message (the SDK's own transform costs 0.1–0.2 ms per message).
    """
    return _scan(messages, depth=2, encoding=False, stop_at_other=True) == _PLAIN


def _scan(values: list[Any], *, depth: int, encoding: bool, stop_at_other: bool) -> int:
    """One walk over ``values`` (at nesting ``depth``), level by level, so the depth is
    known without recursing: ``_PLAIN`` (all plain JSON), ``_OTHER`` (it holds other
    objects, the SDK's to encode; with ``stop_at_other`` the walk ends there) or
    ``_UNSENDABLE``: a container deeper than :data:`MAX_REQUEST_DEPTH`, and with
    ``encoding`` a string with a lone surrogate or a float that is not finite."""
    found, level = _PLAIN, values
    while level:
        if depth > MAX_REQUEST_DEPTH and any(isinstance(x, _NESTED) for x in level):
            return _UNSENDABLE
        below: list[Any] = []
        push = below.append
        for item in level:
            kind = type(item)
            if kind is str:
                if encoding and not item.isascii() and _lone_surrogate(item):
                    return _UNSENDABLE
            elif kind is dict:
                for key, child in item.items():
                    if type(key) is not str:
                        if stop_at_other:
                            return _OTHER
                        found = _OTHER
                    elif encoding and not key.isascii() and _lone_surrogate(key):
                        return _UNSENDABLE
                    if type(child) is not str:
                        push(child)
                    elif encoding and not child.isascii() and _lone_surrogate(child):
                        return _UNSENDABLE
            elif kind is list:
                below.extend(item)
            elif kind in _LEAVES:
                if encoding and kind is float and not math.isfinite(item):
                    return _UNSENDABLE
            elif isinstance(item, _SCALARS):  # str, int and float subclasses (enums) are JSON
                if encoding and _scalar_problem(item) is not None:
                    return _UNSENDABLE
            elif stop_at_other:
                return _OTHER
            else:
                found = _OTHER
                if isinstance(item, _NESTED):  # a tuple, a dict subclass: still encoded as JSON
                    below.extend(item.values() if isinstance(item, dict) else item)
        level = below
        depth += 1
    return found


def send_as_is(kwargs: dict[str, Any], key: str, *, sdk_sees: list[Any]) -> None:
    """Send ``kwargs[key]`` (plain JSON, for which the SDK's request transform is the
    identity) through ``extra_body``, documented to replace top-level keys of the JSON
    body, and give the SDK's own argument ``sdk_sees`` instead. Nothing changes when the
    caller's ``extra_body`` already sets ``key`` or is not a dict."""
    extra = kwargs.get("extra_body")
    if extra is not None and (not isinstance(extra, dict) or key in extra):
        return
    kwargs["extra_body"] = {**(extra or {}), key: kwargs[key]}
    kwargs[key] = sdk_sees


#: ``create`` arguments that are not part of the JSON body.
_NOT_BODY = frozenset({"extra_headers", "extra_query", "timeout"})


def request_problem(body: Mapping[str, Any], *, encoding: bool = False) -> str | None:
    """Where ``body`` cannot be sent as JSON, or ``None``: nesting deeper than
    :data:`MAX_REQUEST_DEPTH`, and with ``encoding`` also a string with a lone surrogate
    (not UTF-8) or a float that is not finite (not JSON), as the SDKs encode neither.

    Only dicts, lists and tuples are walked (other objects are the SDK's to encode),
    without recursion, so any depth is measured; the path is traced only when there is
    something to name.
    """
    values = [v for k, v in body.items() if k not in _NOT_BODY]
    if _scan(values, depth=1, encoding=encoding, stop_at_other=False) != _UNSENDABLE:
        return None
    return _locate(body, encoding=encoding)


def _locate(body: Mapping[str, Any], *, encoding: bool) -> str:
    """The first place in ``body`` :func:`_scan` objects to, as a path and a reason."""
    pending: list[tuple[Any, int, Any]] = [(body, 0, None)]  # (container, depth, where)
    while pending:
        item, depth, where = pending.pop()
        if depth > MAX_REQUEST_DEPTH:
            return f"{_path(where)}: nests more than {MAX_REQUEST_DEPTH} levels deep"
        children: Iterable[tuple[Any, Any]] = (
            item.items() if isinstance(item, dict) else enumerate(item)
        )
        for key, value in children:
            if encoding and type(key) is str and not key.isascii() and _lone_surrogate(key):
                return f"{_path(where) or 'the body'}: the key {_short(key)} {_NOT_UTF8}"
            kind = type(value)
            if kind is str:  # most values: one C call when ASCII
                if encoding and not value.isascii() and _lone_surrogate(value):
                    return f"{_path((where, key))}: {_short(value)} {_NOT_UTF8}"
            elif kind is dict or kind is list or kind is tuple or isinstance(value, _NESTED):
                if depth or key not in _NOT_BODY:
                    pending.append((value, depth + 1, (where, key)))
            elif encoding:
                problem = _scalar_problem(value)
                if problem is not None and (depth or key not in _NOT_BODY):
                    return f"{_path((where, key))}: {problem}"
    return "the body cannot be encoded as JSON"


_NOT_UTF8 = "has a lone surrogate, which is not UTF-8"


def _lone_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _scalar_problem(value: Any) -> str | None:
    if isinstance(value, str):
        if not value.isascii() and _lone_surrogate(value):
            return f"{_short(value)} {_NOT_UTF8}"
    elif isinstance(value, float) and not math.isfinite(value):
        return f"{value!r} is not a JSON number"
    return None


def _short(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:37] + "...")


def _path(where: Any) -> str:
    """``messages[2].content`` from the ``(parent, key)`` chain the walk keeps."""
    keys: list[Any] = []
    while where is not None:
        where, key = where
        keys.append(key)
    out = ""
    for key in reversed(keys):
        if isinstance(key, int):
            out += f"[{key}]"
        else:
            out += f".{key}" if out else str(key)
    return out


def _is_list_like(value: Any) -> bool:
    return isinstance(value, Iterable) and not isinstance(value, (str, bytes, bytearray, Mapping))


def _shape_problem(kind: WireKind, body: Mapping[str, Any], *, sdk_call: bool) -> str | None:
    """What budgetmix cannot add the notice to or read, in the shape of ``body``."""
    key = history_key(kind)
    history = body.get(key)
    text_input = kind == "responses" and isinstance(history, str)
    if not (history is None or text_input or _is_list_like(history)):
        return f"{key}: expected a list, got {type(history).__name__}"
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        return f"stream: expected true or false, got {type(stream).__name__}"
    extra = body.get("extra_body")
    if sdk_call and extra is not None and not isinstance(extra, Mapping):
        return f"extra_body: expected a dict, got {type(extra).__name__}"
    if kind == "anthropic" and isinstance(history, SEQUENCES) and history:
        last = history[-1]
        if isinstance(last, dict) and last.get("role") == "user":
            content = last.get("content")
            if content is not None and not isinstance(content, (str, list, tuple)):
                return (
                    f"messages[{len(history) - 1}].content: expected a string or a list of "
                    f"content blocks, got {type(content).__name__}"
                )
    return None


def check_request(kind: WireKind, body: Mapping[str, Any], *, sdk_call: bool) -> bool | None:
    """Refuse, before anything is charged or sent, a request budgetmix cannot handle;
    with ``sdk_call``, whether the history is plain JSON (see :func:`plain_json`).

    The history (``messages`` / ``input``, where text from models and tools ends up) and
    the top-level values are checked to encode as JSON; other arguments (tools,
    ``extra_body``) are the SDK's to encode, as it is theirs to walk every turn.

    Raises:
        ConfigError: naming the field.
    """
    problem = _shape_problem(kind, body, sdk_call=sdk_call)
    plain = None
    if problem is None and sdk_call:
        history = body.get(history_key(kind))
        found = _PLAIN if isinstance(history, list) else _OTHER
        if isinstance(history, (list, tuple)):
            found = _scan(list(history), depth=2, encoding=True, stop_at_other=False)
        if found == _UNSENDABLE or any(
            _scalar_problem(v) is not None for k, v in body.items() if k not in _NOT_BODY
        ):
            problem = _locate(body, encoding=True)
            problem += "; the request content could not be encoded as JSON"
        plain = found == _PLAIN and isinstance(history, list)
    if problem is not None:
        raise ConfigError(f"{problem}; nothing was sent (no turn was charged)")
    return plain


def _with_notice(episode: Episode, turn: Turn, kind: WireKind, history: Any) -> Any:
    """A new history (the caller's is never touched) with the notice where the notice
    policy places it: a message of its own for this request (``"ephemeral"``), or in
    the latest observation with the episode's earlier notices back in theirs
    (``"observation"``, :mod:`budgetmix.adapters._placement`)."""
    raw = history if isinstance(history, str) and kind == "responses" else history or ()
    if notice_placement(episode.controller.notice) == "observation":
        return place_observation_notice(episode, kind, raw, turn.notice)
    if kind == "chat":
        return turn.openai_chat(raw)
    if kind == "responses":
        return turn.openai_responses(raw)
    return turn.anthropic(raw)


class TurnRequest:
    """One budgeted request: checks the price, records request-side mistakes, charges
    the turn, and builds the body to send (notice injected, tools off on a grace turn).

    ``sdk_call``: ``body`` is the keyword arguments of an SDK's ``create`` (not encoded
    yet): their content is checked to encode as JSON too (the HTTP transport checks the
    depth of the body it reads itself, before choosing the episode). ``url``: where the
    request goes (the client's base URL, or the request's), for the turn's provider and
    server attributes.

    Raises (from the constructor):
        ConfigError: the request has a shape budgetmix cannot add the notice to, content
            that cannot be encoded (``sdk_call``), or the episode has a cost limit and
            the model has no known price; nothing was charged or sent.
        BudgetExhausted / EarlyStopped: the turn was refused; nothing may be sent.
    """

    __slots__ = (
        "_original",
        "_plain",
        "_sdk_transform",
        "body",
        "episode",
        "kind",
        "model",
        "pricing",
        "stream",
        "turn",
    )

    def __init__(
        self,
        episode: Episode,
        kind: WireKind,
        body: Mapping[str, Any],
        pricing: Pricing,
        *,
        sdk_transform: bool = False,
        sdk_call: bool = False,
        url: Any = None,
    ) -> None:
        self._plain = check_request(kind, body, sdk_call=sdk_call)
        model = body.get("model")
        self.model = model if isinstance(model, str) else None
        if episode.ledger.limit("cost_usd") is not None:
            pricing.require(self.model)
        results_sent(episode, kind, body)  # before the turn: they answer the last one
        self.episode = episode
        self.kind: WireKind = kind
        self.pricing = pricing
        self._sdk_transform = sdk_transform
        turn = episode.begin_turn(model=self.model)
        describe_turn(turn, kind, url)
        self.turn: Turn = turn
        self._original = body
        self.body = out = dict(body)
        key = history_key(kind)
        out[key] = _with_notice(episode, turn, kind, out.get(key))
        if turn.grace and out.get("tools"):
            # tools stay declared (prompt cache) but the wrap-up turn may not call them
            out["tool_choice"] = {"type": "none"} if kind == "anthropic" else "none"
        self.stream = out.get("stream") is True
        if self.stream and kind == "chat":
            # a streamed completion reports usage (in a final chunk) only when asked to
            opts = out.get("stream_options")
            out["stream_options"] = {
                **(opts if isinstance(opts, dict) else {}),
                "include_usage": True,
            }

    def sdk_kwargs(self, **overrides: Any) -> dict[str, Any]:
        """Keyword arguments for the provider SDK's ``create``: :attr:`body` plus ``overrides``.

        The SDKs (Stainless-generated) transform every message against a union of
        TypedDicts before encoding it, 0.1–0.2 ms per message, and for plain JSON
        data (dicts with string keys, lists, strings, numbers, booleans, ``None``) that
        transform is the identity. So when the caller's history is plain JSON, the
        history with the notice rides in ``extra_body`` (documented to replace top-level
        keys of the JSON body) and the SDK's own argument is left empty: the bytes sent
        are those the SDK would send, without the transform. With ``sdk_transform`` the
        SDK gets the caller's list as an unwrapped call does (and transforms it, for
        code that patches the SDK's ``create`` and reads it); only the notice skips it.
        Anything else (pydantic objects, generators, file handles) takes the SDK's own
        path, notice included.
        """
        key = history_key(self.kind)
        kwargs = {**self.body, **overrides}
        original = self._original.get(key)
        plain = self._plain  # found before the charge when the SDK's arguments were checked
        if plain is None:
            plain = isinstance(original, list) and plain_json(original)
        if plain and isinstance(original, list):
            send_as_is(kwargs, key, sdk_sees=original if self._sdk_transform else [])
        return kwargs

    def accumulator(self) -> Accumulator:
        """A stream accumulator for this request's wire kind."""
        return accumulator(self.kind)

    def _charged_usage(self, parsed: ParsedResponse) -> tuple[int, int]:
        """The input and output tokens to charge: the provider's counts; a usage value
        that is no count is charged by estimate and said (event and warning)."""
        turn = self.turn
        inp, out = parsed.input_tokens, parsed.output_tokens
        if parsed.usage_invalid:  # never silently 0: charged by an estimate, and said
            inp, out = invalid_usage_estimate(parsed, self.body)
            what = "; ".join(parsed.usage_invalid)[:300]
            attrs = {sc.BM_WIRE: self.kind, sc.BM_USAGE_INVALID: what}
            turn.add_event(sc.BM_EVENT_USAGE_INVALID, attrs)
            _log.warning(
                "budgetmix: the provider's usage is no count (%s); charged %d input and "
                "%d output tokens by estimate",
                what,
                inp,
                out,
            )
        elif inp is None and out is None:
            turn.add_event(sc.BM_EVENT_USAGE_MISSING, {sc.BM_WIRE: self.kind})
        return inp or 0, out or 0

    def finish(self, parsed: ParsedResponse) -> None:
        """Record usage, cost, finish reasons and the response's mistakes on the turn."""
        turn, ep = self.turn, self.episode
        model = parsed.model or self.model
        inp, out = self._charged_usage(parsed)
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
            response_id=parsed.response_id,
        )
        if parsed.truncated:
            turn.add_event(sc.BM_EVENT_RESPONSE_TRUNCATED, {sc.BM_WIRE: self.kind})
        if parsed.empty:
            ep.record_mistake(MistakeKind.MODEL_FORMAT_ERROR, detail="response has no output")
        calls = list(zip(parsed.tool_calls, parsed.call_arguments, strict=True))
        schemas = tool_schemas(self.kind, self._original.get("tools")) if calls else None
        problems: dict[str, str] = {}
        for call, arguments in calls:
            problem = tool_call_problem(call.name, arguments, schemas, truncated=parsed.truncated)
            if problem is not None:  # a call without an id ("") has none to record
                ep.record_mistake(
                    problem[0], tool=call.name, call_id=call.id or None, detail=problem[1]
                )
                problems[call.id] = str(problem[0])
        calls_received(ep, turn, parsed, problems)
        message: dict[str, Any] = {"role": "assistant", "content": parsed.text}
        if calls:
            message["tool_calls"] = [
                {"id": c.id or None, "name": c.name, "arguments": arguments}
                for c, arguments in calls
            ]
        ep.record_message(message)
        if ep.controller.capture_content:
            reason = parsed.finish_reasons[0] if parsed.finish_reasons else None
            if calls and finish_reason(reason) == "stop":  # Responses: "completed"
                reason = "tool_call"
            turn.record_content(
                input_messages=self.body.get("messages", self.body.get("input")),
                output_messages=[message],
                system_instructions=self.body.get("system", self.body.get("instructions")),
                finish_reason=reason,
            )
