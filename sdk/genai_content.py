"""Message content in the GenAI semantic conventions' parts format.

``gen_ai.input.messages``, ``gen_ai.output.messages`` and ``gen_ai.system_instructions``
hold JSON lists shaped as the conventions' schemas say (``gen-ai-input-messages.json``,
``gen-ai-output-messages.json``, ``gen-ai-system-instructions.json``)::

    [{"role": "assistant",
      "parts": [{"type": "text", "content": "..."},
                {"type": "tool_call", "id": "c1", "name": "add", "arguments": {"a": 1}}],
      "finish_reason": "tool_call"}]

A backend that validates the list (Arize Phoenix does) drops one that is not in this
shape, silently. This module turns what budgetmix sees into it: the neutral
``ChatMessage`` of :func:`~budgetmix.adapters.run_agent` (any object with ``role``,
``content``, ``tool_calls``, ``tool_call_id``), OpenAI Chat Completions messages,
Responses input items and Anthropic messages (dicts or SDK objects alike), and lists
already in the parts format, which pass unchanged. Unknown part types become the
conventions' generic part (``{"type": <their type>}``), never an error: capturing
content cannot change an episode's outcome.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "FINISH_REASONS",
    "finish_reason",
    "input_messages",
    "last_text",
    "output_messages",
    "system_instructions",
]

#: Provider finish and stop reasons in the conventions' ``FinishReason`` values.
FINISH_REASONS: Mapping[str, str] = {
    "stop": "stop",
    "end_turn": "stop",
    "stop_sequence": "stop",
    "completed": "stop",
    "pause_turn": "stop",
    "tool_calls": "tool_call",
    "tool_call": "tool_call",
    "tool_use": "tool_call",
    "function_call": "tool_call",
    "length": "length",
    "max_tokens": "length",
    "max_output_tokens": "length",
    "incomplete": "length",
    "model_context_window_exceeded": "length",
    "content_filter": "content_filter",
    "refusal": "content_filter",
    "error": "error",
    "failed": "error",
}
_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
_ROLES |= {"tool": "tool", "function": "tool", "model": "assistant"}
_TEXT_TYPES = {"text", "input_text", "output_text"}


def finish_reason(reason: Any) -> str:
    """``reason`` (a provider's finish or stop reason) as a conventions value; an
    unknown string is kept, anything else reads ``stop``."""
    if not isinstance(reason, str) or not reason:
        return "stop"
    return FINISH_REASONS.get(reason, reason)


def _get(obj: Any, key: str) -> Any:
    """``obj[key]`` for mappings, ``obj.key`` otherwise; None when absent."""
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def _decoded(arguments: Any) -> Any:
    """Tool-call arguments as a JSON value: JSON text decoded, else as given."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return _plain(arguments)


def _plain(value: Any) -> Any:
    """``value`` as JSON-ready data (an SDK model through ``model_dump``)."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence):
        return [_plain(v) for v in value]
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return _plain(dump())
        except Exception:
            return str(value)
    return str(value)


def _tool_call(call: Any) -> dict[str, Any]:
    """A chat ``tool_calls`` entry (flat or under ``function``) as a ``tool_call`` part."""
    function = _get(call, "function")
    source = function if function is not None else call
    part: dict[str, Any] = {"type": "tool_call", "id": _str_or_none(_get(call, "id"))}
    part["name"] = str(_get(source, "name") or "")
    part["arguments"] = _decoded(_get(source, "arguments"))
    return part


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _response_text(content: Any) -> Any:
    """A tool result's content: text blocks joined, other values as JSON-ready data."""
    if isinstance(content, str) or content is None:
        return content if content is not None else ""
    if isinstance(content, Sequence):
        texts = [_get(b, "text") for b in content]
        if texts and all(isinstance(t, str) for t in texts):
            return "".join(texts)
    return _plain(content)


def _block(block: Any) -> dict[str, Any] | None:
    """One content block of any supported wire format as a part (None: nothing to show)."""
    if isinstance(block, str):
        return {"type": "text", "content": block}
    kind = _get(block, "type")
    if kind in _TEXT_TYPES or (kind is None and isinstance(_get(block, "text"), str)):
        return {"type": "text", "content": str(_get(block, "text") or "")}
    if kind == "tool_use":
        part = {"type": "tool_call", "id": _str_or_none(_get(block, "id"))}
        return part | {
            "name": str(_get(block, "name") or ""),
            "arguments": _plain(_get(block, "input")),
        }
    if kind == "tool_result":
        return _response_part(_get(block, "tool_use_id"), _get(block, "content"))
    if kind == "thinking" and isinstance(_get(block, "thinking"), str):
        return {"type": "reasoning", "content": _get(block, "thinking")}
    if kind == "refusal" and isinstance(_get(block, "refusal"), str):
        return {"type": "text", "content": _get(block, "refusal")}
    if kind in {"image_url", "input_image", "image"}:
        return _image_part(block)
    return {"type": kind} if isinstance(kind, str) and kind else None


def _image_part(block: Any) -> dict[str, Any]:
    """An image block as a ``uri`` part when it names one (a data URL is not copied)."""
    source = _get(block, "image_url")
    url = _get(source, "url") if source is not None and not isinstance(source, str) else source
    if isinstance(url, str) and url and not url.startswith("data:"):
        return {"type": "uri", "modality": "image", "uri": url}
    return {"type": "image"}


def _response_part(call_id: Any, content: Any) -> dict[str, Any]:
    return {
        "type": "tool_call_response",
        "id": _str_or_none(call_id),
        "response": _response_text(content),
    }


def _content_parts(content: Any) -> list[dict[str, Any]]:
    """A message's ``content`` (a string or a list of blocks) as parts."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "content": content}] if content else []
    if isinstance(content, Sequence):
        return [p for p in (_block(b) for b in content) if p is not None]
    return [{"type": "text", "content": str(content)}]


def _message(message: Any) -> dict[str, Any] | None:
    """One chat, Anthropic or Responses message as ``{"role", "parts"}`` (None: an item
    that carries nothing to show)."""
    if isinstance(message, str):
        return {"role": "user", "parts": [{"type": "text", "content": message}]}
    parts_given = _get(message, "parts")
    if isinstance(parts_given, list) and _get(message, "role") is not None:
        given = _plain(dict(message)) if isinstance(message, Mapping) else _plain(message)
        return given if isinstance(given, dict) else None
    kind = _get(message, "type")
    if kind == "function_call":
        return {"role": "assistant", "parts": [_item_call(message)]}
    if kind == "function_call_output":
        return {
            "role": "tool",
            "parts": [_response_part(_get(message, "call_id"), _get(message, "output"))],
        }
    role = _ROLES.get(str(_get(message, "role") or ""), None)
    if role is None:
        return None
    parts = _content_parts(_get(message, "content"))
    parts += [_tool_call(c) for c in _get(message, "tool_calls") or ()]
    if role == "tool":
        parts = [_response_part(_get(message, "tool_call_id"), _get(message, "content"))]
    out: dict[str, Any] = {"role": role, "parts": parts}
    name = _get(message, "name")
    if isinstance(name, str) and name and role != "tool":
        out["name"] = name
    return out


def _item_call(item: Any) -> dict[str, Any]:
    call_id = _get(item, "call_id") or _get(item, "id")
    part: dict[str, Any] = {"type": "tool_call", "id": _str_or_none(call_id)}
    return part | {
        "name": str(_get(item, "name") or ""),
        "arguments": _decoded(_get(item, "arguments")),
    }


def _merged(messages: Sequence[Any]) -> list[dict[str, Any]]:
    """The messages, with Responses items joined as chat would have them: a function
    call joins the assistant message before it, a call's output the tool message before."""
    out: list[dict[str, Any]] = []
    for item in messages:
        m = _message(item)
        if m is None:
            continue
        prev = out[-1] if out else None
        from_item = _get(item, "type") in {"function_call", "function_call_output"}
        if from_item and prev is not None and prev["role"] == m["role"]:
            prev["parts"] = [*prev["parts"], *m["parts"]]
            continue
        out.append(m)
    return out


def input_messages(messages: Any) -> list[dict[str, Any]]:
    """``messages`` (a task string, or a sequence of messages or Responses items in any
    supported format) as the conventions' input messages."""
    if isinstance(messages, str):
        return [{"role": "user", "parts": [{"type": "text", "content": messages}]}]
    if not isinstance(messages, Sequence):
        return []
    return _merged(messages)


def output_messages(messages: Any, reason: Any = None) -> list[dict[str, Any]]:
    """The model's reply (messages or items, as :func:`input_messages` reads them) as
    output messages, each with a ``finish_reason`` (``reason``'s, if it has none)."""
    out = input_messages(messages)
    for m in out:
        m.setdefault("finish_reason", finish_reason(reason))
        m["finish_reason"] = finish_reason(m["finish_reason"])
    return out


def system_instructions(value: Any) -> list[dict[str, Any]]:
    """A system prompt (a string, or text blocks) as the conventions' system instructions."""
    return _content_parts(value)


def last_text(
    messages: Sequence[Mapping[str, Any]], role: str, *, notice: str | None = None
) -> str | None:
    """The text of the last ``role`` message with text in parts-format ``messages``
    (its text parts joined), or None; a budget ``notice`` (a message or part of its own,
    or appended to a text) does not count."""
    for m in reversed(messages):
        if m.get("role") != role:
            continue
        texts = [str(p["content"]) for p in m.get("parts", ()) if p.get("type") == "text"]
        if notice:
            texts = [t.removesuffix(notice).rstrip() for t in texts if t != notice]
            texts = [t for t in texts if t]
        if texts:
            return "\n".join(texts)
    return None
