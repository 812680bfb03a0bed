"""Whether a request can be sent, decided before anything is charged: the JSON checks
shared by the SDK wrappers and the HTTP transport (through
:class:`~budgetmix.adapters._turn.TurnRequest`).

:func:`check_request` refuses a body budgetmix cannot add the notice to or encode
(naming the field), :func:`request_problem` is the transport's depth check of a body it
read itself, and :func:`plain_json` / :func:`send_as_is` let an SDK skip its request
transform for a plain JSON history.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from budgetmix.adapters._wire import WireKind, history_key
from budgetmix.adapters._wire.common import SEQUENCES
from budgetmix.exceptions import ConfigError

__all__ = [
    "MAX_REQUEST_DEPTH",
    "check_request",
    "plain_json",
    "request_problem",
    "send_as_is",
]


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
        verdict = _scan_level(level, below, encoding, stop_at_other)
        if verdict == _UNSENDABLE or (verdict == _OTHER and stop_at_other):
            return verdict
        found = max(found, verdict)
        level = below
        depth += 1
    return found


def _scan_level(level: list[Any], below: list[Any], encoding: bool, stop_at_other: bool) -> int:
    """:func:`_scan`'s verdict on one level; the containers' children go to ``below``."""
    found = _PLAIN
    for item in level:
        kind = type(item)
        if kind is str:
            if encoding and not item.isascii() and _lone_surrogate(item):
                return _UNSENDABLE
            continue
        if kind is dict:
            verdict = _scan_dict(item, below, encoding, stop_at_other)
        elif kind is list:
            below.extend(item)
            continue
        else:
            verdict = _scan_value(item, kind, below, encoding)
        if verdict == _UNSENDABLE or (verdict == _OTHER and stop_at_other):
            return verdict
        found = max(found, verdict)
    return found


def _scan_dict(item: dict[Any, Any], below: list[Any], encoding: bool, stop_at_other: bool) -> int:
    """A plain dict's keys and string values; its other values go to ``below``."""
    found = _PLAIN
    push = below.append
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
    return found


def _scan_value(item: Any, kind: type, below: list[Any], encoding: bool) -> int:
    """Anything but a str, a dict or a list: a JSON leaf, a scalar subclass, or another
    object (a tuple or a dict subclass is still walked: it is encoded as JSON)."""
    if kind in _LEAVES:
        if encoding and kind is float and not math.isfinite(item):
            return _UNSENDABLE
        return _PLAIN
    if isinstance(item, _SCALARS):  # str, int and float subclasses (enums) are JSON
        if encoding and _scalar_problem(item) is not None:
            return _UNSENDABLE
        return _PLAIN
    if isinstance(item, _NESTED):
        below.extend(item.values() if isinstance(item, dict) else item)
    return _OTHER


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
            problem = _child_problem(key, value, depth, where, encoding, pending)
            if problem is not None:
                return problem
    return "the body cannot be encoded as JSON"


def _child_problem(
    key: Any,
    value: Any,
    depth: int,
    where: Any,
    encoding: bool,
    pending: list[tuple[Any, int, Any]],
) -> str | None:
    """:func:`_locate`'s verdict on one ``key: value`` of a container at ``depth``; a
    container value to walk goes to ``pending``."""
    if encoding and type(key) is str and not key.isascii() and _lone_surrogate(key):
        return f"{_path(where) or 'the body'}: the key {_short(key)} {_NOT_UTF8}"
    kind = type(value)
    counted = depth or key not in _NOT_BODY  # the top level's non-body arguments are not
    if kind is str:  # most values: one C call when ASCII
        if encoding and not value.isascii() and _lone_surrogate(value):
            return f"{_path((where, key))}: {_short(value)} {_NOT_UTF8}"
    elif kind is dict or kind is list or kind is tuple or isinstance(value, _NESTED):
        if counted:
            pending.append((value, depth + 1, (where, key)))
    elif encoding:
        problem = _scalar_problem(value)
        if problem is not None and counted:
            return f"{_path((where, key))}: {problem}"
    return None


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
