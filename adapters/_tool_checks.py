"""Checks of the tool calls in a response against the tools the request declared.

A call is a mistake when it names no declared function tool (``unknown_tool``),
or when its arguments are not a JSON object or do not match the tool's JSON
schema (``invalid_tool_arguments``). The schema check covers the keywords tool
schemas use in practice (see :func:`validate_json`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from budgetmix.adapters._wire import WireKind, declared_tool
from budgetmix.adapters._wire.common import SEQUENCES, as_seq, repr_bounded
from budgetmix.events import MistakeKind

__all__ = ["tool_call_problem", "tool_schemas", "validate_json"]


def tool_schemas(kind: WireKind, tools: Any) -> dict[str, Mapping[str, Any]] | None:
    """Declared function tools -> ``{name: JSON schema}``; ``None`` when the request
    declares no tools (then names are not checked) or uses hosted tools we can't see."""
    if not isinstance(tools, SEQUENCES) or not tools:
        return None
    out: dict[str, Mapping[str, Any]] = {}
    for tool in tools:
        found = declared_tool(kind, tool)
        if found is None:
            return None
        name, params = found
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
    (``$ref``, formats, bounds) are accepted unchecked, and so is a keyword whose own
    value is malformed (the schema is the caller's; the model is not blamed for it).
    Returns the first error or ``None``.
    """
    if not isinstance(schema, Mapping):
        return None
    return (
        _check_value(schema, value, path)
        or _check_combinators(schema, value, path)
        or _check_children(schema, value, path)
    )


def _check_value(schema: Mapping[str, Any], value: Any, path: str) -> str | None:
    """``type``, ``enum`` and ``const``."""
    types = schema.get("type")
    names = [types] if isinstance(types, str) else [t for t in as_seq(types) if isinstance(t, str)]
    if names and not any(_type_ok(value, t) for t in names):
        return f"{path}: expected {'/'.join(names)}, got {type(value).__name__}"
    enum = schema.get("enum")
    if isinstance(enum, SEQUENCES) and value not in enum:
        return f"{path}: {repr_bounded(value)} is not one of {repr_bounded(enum)}"
    if "const" in schema and value != schema["const"]:
        return f"{path}: expected {repr_bounded(schema['const'])}"
    return None


def _check_combinators(schema: Mapping[str, Any], value: Any, path: str) -> str | None:
    """``anyOf``, ``oneOf`` (at least one must hold) and ``allOf`` (each must)."""
    for key in ("anyOf", "oneOf"):
        options = as_seq(schema.get(key))
        if options and all(validate_json(s, value, path) is not None for s in options):
            return f"{path}: matches none of {key}"
    return _first(validate_json(sub, value, path) for sub in as_seq(schema.get("allOf")))


def _check_children(schema: Mapping[str, Any], value: Any, path: str) -> str | None:
    """An object's properties, or an array's ``items``."""
    if isinstance(value, dict):
        return _validate_object(schema, value, path)
    items = schema.get("items")
    if isinstance(value, list) and isinstance(items, Mapping):
        return _first(validate_json(items, x, f"{path}[{i}]") for i, x in enumerate(value))
    return None


def _first(errors: Iterable[str | None]) -> str | None:
    """The first error of ``errors`` (evaluated lazily), or ``None``."""
    return next((e for e in errors if e), None)


def _validate_object(schema: Mapping[str, Any], value: dict[str, Any], path: str) -> str | None:
    props = schema.get("properties")
    if not isinstance(props, Mapping):
        props = {}
    for req in as_seq(schema.get("required")):
        if isinstance(req, str) and req not in value:
            return f"{path}: missing required property {req!r}"
    extra = schema.get("additionalProperties", True)
    for key, item in value.items():
        if key in props:
            err = validate_json(props[key], item, f"{path}.{key}")
            if err:
                return err
        elif extra is False:
            return f"{path}: unexpected property {repr_bounded(key)}"
        elif isinstance(extra, Mapping):
            err = validate_json(extra, item, f"{path}.{repr_bounded(key)}")
            if err:
                return err
    return None


def tool_call_problem(
    name: str,
    arguments: str | Mapping[str, Any],
    schemas: Mapping[str, Mapping[str, Any]] | None,
    *,
    truncated: bool,
) -> tuple[MistakeKind, str] | None:
    """The mistake a call of ``name`` with ``arguments`` (JSON text, or the object the
    provider sent) makes, if any: unknown name, unparsable or invalid arguments."""
    if schemas is not None and name not in schemas:
        return MistakeKind.UNKNOWN_TOOL, f"unknown tool {repr_bounded(name)}"
    args: Any = arguments
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError as exc:
            why = " (response truncated at the token limit)" if truncated else ""
            return MistakeKind.INVALID_TOOL_ARGUMENTS, f"arguments are not valid JSON{why}: {exc}"
        except RecursionError:
            return MistakeKind.INVALID_TOOL_ARGUMENTS, TOO_DEEP
    if not isinstance(args, Mapping):
        return MistakeKind.INVALID_TOOL_ARGUMENTS, "arguments are not a JSON object"
    schema = schemas.get(name) if schemas is not None else None
    if schema:
        try:
            err = validate_json(schema, dict(args))
        except RecursionError:  # a schema that refers to itself, deeper than Python recurses
            err = TOO_DEEP
        if err:
            return MistakeKind.INVALID_TOOL_ARGUMENTS, err
    return None


#: The detail of arguments nested too deep to read or check.
TOO_DEEP = "arguments nest too deep to read as JSON"
