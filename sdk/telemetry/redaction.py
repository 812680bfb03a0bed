"""Redaction: no credential ever reaches an exported span, event, log or written file.

:func:`redact_text` sees through the usual wrappings before it matches: percent-encoding
(``token%3Dsk-...``, ``Bearer%20sk-...``), JSON and Python ``\\u``/``\\x`` escapes
(``"\\u0073k-..."``), HTML entities (``&#115;k-...``, ``q=1&amp;AKIA...``), nested up to
three times, and keys glued to a letter or digit (``xsk-proj-...``, ``1AKIA...``) for the
formats distinctive enough to tell (``sk-ant-``, ``sk-proj-``, a long ``sk-`` key with
letters and digits, AWS key ids). When a decoded view holds a credential, the text is
returned decoded, with it masked. Base64 is not decoded: a key inside base64 text (a
basic-auth header's value aside, which is masked after ``Authorization:``) is not found.
:mod:`budgetmix.telemetry.log_redaction` applies it to the records of the HTTP and
provider SDK loggers.
"""

from __future__ import annotations

import functools
import html
import json
import math
import re
import urllib.parse
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import Link, Status
from opentelemetry.util.types import Attributes, AttributeValue

__all__ = [
    "REDACTED",
    "RedactingSpanExporter",
    "redact_attributes",
    "redact_content",
    "redact_data",
    "redact_text",
]

REDACTED = "[REDACTED]"
# Attribute keys whose whole value is a credential: matched on the end of the key so
# `http.request.header.authorization` and `x-api-key` match, `gen_ai.usage.input_tokens` not.
_SECRET_KEY = re.compile(
    r"(?:^|[._\-])(?:authorization|api[_\-]?key|apikey|secret|password|passwd|"
    r"(?:access|refresh|auth|id|session|bearer)[_\-]token|cookie|private[_\-]key)$",
    re.IGNORECASE,
)
# JSON and repr() escapes (`\n`, `\t`, `\x01`, `\u0001`, `\U0001f600`, `\033`): text that
# was already encoded (tool arguments are JSON strings, exception messages hold reprs)
# puts one right before a key, and its last character is a letter or digit.
_ESCAPES = (r"[nrtbfv0]", r"[0-7]{3}", r"x[0-9A-Fa-f]{2}", r"u[0-9A-Fa-f]{4}", r"U[0-9A-Fa-f]{8}")


def _key_start(prefix: str) -> str:
    """``prefix`` (fixed width) where a key may start: not glued to a letter or digit,
    or right after an escape. The check follows the literal so the regex engine can
    skip ahead to the prefix's first character (a leading lookbehind would stop that)."""
    after_escape = "".join(f"|(?<=\\\\{esc}{prefix})" for esc in _ESCAPES)
    return f"{prefix}(?:(?<![A-Za-z0-9]{prefix}){after_escape})"


# Credentials recognisable by their shape, wherever they appear inside a string.
_SHAPES = (
    _key_start("sk-") + r"[A-Za-z0-9_\-]{8,}",  # OpenAI (sk-, sk-proj-), Anthropic (sk-ant-)
    _key_start("(?i:bearer)") + r"(?:\s|\\[nrt])+[A-Za-z0-9._~+/=\-]{8,}",
    _key_start("gh[pousr]_") + r"[A-Za-z0-9]{20,}",
    _key_start("github_pat_") + r"[A-Za-z0-9_]{20,}",
    _key_start("hf_") + r"[A-Za-z0-9]{20,}",
    _key_start("xox[abprs]-") + r"[A-Za-z0-9\-]{10,}",
    _key_start("(?:AKIA|ASIA|ABIA|ACCA)") + r"[0-9A-Z]{16}",  # AWS access key ids
    _key_start("AIza") + r"[0-9A-Za-z_\-]{30,}",  # Google API keys
)
# Keys found even glued to a letter or digit: shapes no ordinary word has.
_GLUED = (
    r"sk-(?:ant|proj|svcacct|admin)-[A-Za-z0-9_\-]{8,}",
    r"sk-(?=[A-Za-z0-9]{0,200}?[0-9])(?=[A-Za-z0-9]{0,200}?[A-Za-z])[A-Za-z0-9]{32,}",
    r"(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}(?![0-9A-Z])",
)
_ALL_SHAPES = (*_SHAPES, *_GLUED)
_SHAPE = re.compile("|".join(_ALL_SHAPES))
_SHAPE_PATTERNS = tuple(re.compile(p) for p in _ALL_SHAPES)
# `name: value` / `name=value` where the name says the value is a credential (an echoed
# header, a query string, a config dump): only the value is masked. Each name holds one
# of _LABEL_WORDS, a substring test that spares most text the regex.
_LABELLED = re.compile(
    r"(?i:authorization|api[_\-]?key|client[_\-]secret|secret[_\-]access[_\-]key|"
    r"(?:access|refresh|auth|session|id)[_\-]token|password|passwd)"
    r"\\?[\"']?[ \t]*[:=][ \t]*\\?[\"']?"
    r"(?P<value>(?:(?i:bearer|basic|token)[ \t]+)?[^\s\"',;\\]+)"
)
_LABEL_WORDS = ("authoriz", "api", "secret", "token", "passw")


def _has_label(text: str) -> bool:
    lowered = text.lower()
    return any(word in lowered for word in _LABEL_WORDS) and _LABELLED.search(text) is not None


def _raw_needs_masking(text: str) -> bool:
    return _SHAPE.search(text) is not None or _has_label(text)


def _needs_masking(text: str) -> bool:
    """Whether ``text`` holds anything :func:`redact_text` would mask, as it stands or
    under up to three layers of encoding (the common answer is no, and this is the check
    every exported string goes through)."""
    if _raw_needs_masking(text):
        return True
    if "%" not in text and "&" not in text and "\\" not in text:  # nothing encoded
        return False
    view = text
    for _ in range(3):
        deeper = _decoded(view)
        if deeper == view:
            return False
        view = deeper
        if _raw_needs_masking(view):
            return True
    return False


def _masked_spans(text: str) -> list[tuple[int, int]]:
    """Where ``text`` holds a credential, as merged ``(start, end)`` ranges.

    Each pattern is matched on its own, so a match that begins before a key (``Bearer``
    in front of an ``sk-`` key) cannot hide the part of the key it does not cover.
    """
    found = sorted(m.span() for pattern in _SHAPE_PATTERNS for m in pattern.finditer(text))
    found += [m.span("value") for m in _LABELLED.finditer(text)]
    found.sort()
    merged: list[tuple[int, int]] = []
    for start, end in found:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


_JSON_ESCAPE = re.compile(r"\\(?:u([0-9A-Fa-f]{4})|x([0-9A-Fa-f]{2}))")
_PERCENT = re.compile(r"%[0-9A-Fa-f]{2}")
_ENTITY = re.compile(r"&(?:#[0-9]+;?|#[xX][0-9A-Fa-f]+;?|[A-Za-z][A-Za-z0-9]*;)")


def _unescape_json(text: str) -> str:
    def one(m: re.Match[str]) -> str:
        code = int(m.group(1) or m.group(2), 16)
        return m.group(0) if 0xD800 <= code <= 0xDFFF else chr(code)  # lone surrogates stay

    return _JSON_ESCAPE.sub(one, text)


def _decoded(text: str) -> str:
    """``text`` with one layer of percent-encoding, JSON escapes and HTML entities undone
    (each only where the text holds one: the common text is returned as it is)."""
    if "%" in text and _PERCENT.search(text):
        text = urllib.parse.unquote(text, errors="surrogateescape")
    if "\\" in text and _JSON_ESCAPE.search(text):
        text = _unescape_json(text)
    if "&" in text and _ENTITY.search(text):
        text = html.unescape(text)
    return text


def _mask(text: str) -> str:
    if not _raw_needs_masking(text):
        return text
    parts: list[str] = []
    last = 0
    for start, end in _masked_spans(text):
        parts.append(text[last:start])
        parts.append(REDACTED)
        last = end
    parts.append(text[last:])
    return "".join(parts)


def redact_text(text: str) -> str:
    """``text`` with every credential-shaped substring replaced by :data:`REDACTED`.

    Recognised: OpenAI ``sk-``/``sk-proj-`` and Anthropic ``sk-ant-`` keys, ``Bearer``
    tokens, AWS access key ids (``AKIA``/``ASIA``), GitHub, Hugging Face, Slack and
    Google tokens, and the value after a credential name (``Authorization:``,
    ``x-api-key=``, ``"password": ``). A key counts at a line start, after a tab or
    any other non-alphanumeric character, and after a JSON or ``repr`` escape
    (``\\n``, ``\\t``, ``\\u0001``), so text that was already encoded is masked too;
    the distinctive formats count glued to a letter or digit too. Percent-encoding,
    ``\\u``/``\\x`` escapes and HTML entities are undone first (up to three layers):
    where the decoded text holds a credential, it is returned decoded and masked.
    Base64 is not decoded.
    """
    masked = view = _mask(text)
    for _ in range(3):  # each layer decoded; where one holds a key, that layer, masked
        deeper = _decoded(view)
        if deeper == view:
            break
        view = deeper
        if _raw_needs_masking(view):
            view = masked = _mask(view)
    return masked


def _scrub_value(value: AttributeValue) -> AttributeValue:
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Sequence) and any(isinstance(v, str) for v in value):
        return tuple(redact_text(v) if isinstance(v, str) else v for v in value)
    return value


@functools.lru_cache(maxsize=4096)
def _is_secret_key(key: str) -> bool:
    # Spans repeat the same few keys: cache the verdict instead of re-running the regex.
    return _SECRET_KEY.search(key) is not None


def redact_attributes(attributes: Attributes) -> dict[str, AttributeValue]:
    """Return a copy of ``attributes`` with credentials masked as :data:`REDACTED`.

    A key named like a credential (``authorization``, ``api_key``, ``x-api-key``,
    ``*_secret``, ``password``, ``*_token`` other than usage counts, ``cookie``) has
    its whole value replaced; inside any other string value, credentials are masked
    as :func:`redact_text` does. Never raises.
    """
    out: dict[str, AttributeValue] = {}
    for key, value in (attributes or {}).items():
        out[key] = REDACTED if _is_secret_key(key) else _scrub_value(value)
    return out


def _has_secret(attributes: Attributes) -> bool:
    for key, value in (attributes or {}).items():
        if _is_secret_key(key):
            return True
        if isinstance(value, str):
            if _needs_masking(value):
                return True
        elif isinstance(value, Sequence) and any(
            isinstance(v, str) and _needs_masking(v) for v in value
        ):
            return True
    return False


def _redacted_or_none(attributes: Attributes) -> dict[str, AttributeValue] | None:
    """The redacted copy, or None when nothing needs masking (the common, copy-free case)."""
    return redact_attributes(attributes) if _has_secret(attributes) else None


# ---------------------------------------------------------------- captured content

_MAX_DEPTH = 64  # deeper content is cut, far below Python's recursion limit
_CYCLE = "[cycle]"
_TOO_DEEP = "[too deep]"


def _type_name(value: object) -> str:
    try:
        return str(type(value).__qualname__)
    except Exception:
        return "object"


def _text_of(value: object) -> str:
    """``str(value)``, else ``repr(value)``, else a placeholder naming the type; masked."""
    for render in (str, repr):
        try:
            return redact_text(str.__str__(render(value)))
        except Exception:  # a hostile __str__/__repr__: try the next, then give up
            continue
    return f"[unrepresentable {_type_name(value)}]"


def _json_ready(value: object, depth: int, path: set[int]) -> object:
    """``value`` as plain JSON data with every string masked; never raises."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return redact_text(str.__str__(value))
    if isinstance(value, int):
        try:
            int.__repr__(value)  # beyond Python's digit limit there is no decimal text
        except ValueError:
            return f"[int of {value.bit_length()} bits]"
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else float.__repr__(value)
    if not isinstance(value, (dict, list, tuple, set, frozenset)):
        return _text_of(value)
    if depth >= _MAX_DEPTH:
        return _TOO_DEEP
    if id(value) in path:
        return _CYCLE
    path.add(id(value))
    try:
        if isinstance(value, dict):
            return _json_ready_dict(value, depth, path)
        return [_json_ready(item, depth + 1, path) for item in value]
    except Exception:  # mutated while read, a hostile __iter__ or __hash__
        return f"[unreadable {_type_name(value)}]"
    finally:
        path.discard(id(value))


def _json_ready_dict(value: dict[Any, Any], depth: int, path: set[int]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, item in list(dict.items(value)):
        name = redact_text(str.__str__(key)) if isinstance(key, str) else _text_of(key)
        out[name] = REDACTED if _is_secret_key(name) else _json_ready(item, depth + 1, path)
    return out


def redact_content(value: object) -> str:
    """The text that content capture puts on a span for ``value``, credentials masked.

    A string is kept as it is; anything else becomes JSON. Masking happens on the
    strings inside ``value`` *before* encoding (so an escape such as ``\\n`` never hides
    a key), and a value under a credential-named key (``api_key``, ``Authorization``,
    ``password``, ...) is replaced whole. The encoding is total: non-string keys are
    written as text, a cycle as ``"[cycle]"``, nesting beyond 64 levels as
    ``"[too deep]"``, an object as its ``str()`` (else ``repr()``, else a placeholder
    naming its type). Never raises.
    """
    if isinstance(value, str):
        return redact_text(str.__str__(value))
    try:
        return json.dumps(_json_ready(value, 0, set()))
    except Exception:  # unreachable for plain JSON data; a guard, not a path
        return f"[unencodable {_type_name(value)}]"


def redact_data(value: object) -> object:
    """``value`` (JSON-like data: what budgetmix writes to files) with every string
    masked as :func:`redact_text` does and a value under a credential-named key
    replaced whole; numbers, bools and ``None`` as they are (NaN included), other
    objects as text. Nesting past 64 levels is cut (``"[too deep]"``). Never raises."""
    return _data(value, 0)


def _data(value: object, depth: int) -> object:
    if isinstance(value, str):
        return redact_text(str.__str__(value))
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if not isinstance(value, (dict, list, tuple)):
        return _text_of(value)
    if depth >= _MAX_DEPTH:
        return _TOO_DEEP
    if isinstance(value, dict):
        out: dict[str, object] = {}
        for key, item in list(dict.items(value)):
            name = redact_text(key) if isinstance(key, str) else _text_of(key)
            out[name] = REDACTED if _is_secret_key(name) else _data(item, depth + 1)
        return out
    return [_data(item, depth + 1) for item in value]


class _RedactedSpan(ReadableSpan):
    """A redacted copy that keeps the original's dropped-item counts for the exporters."""

    def __init__(self, original: ReadableSpan, **fields: Any) -> None:
        super().__init__(**fields)
        self._original = original

    @property
    def dropped_attributes(self) -> int:
        return self._original.dropped_attributes

    @property
    def dropped_events(self) -> int:
        return self._original.dropped_events

    @property
    def dropped_links(self) -> int:
        return self._original.dropped_links


class RedactingSpanExporter(SpanExporter):
    """Wraps an exporter so no credential on a span, event, link or resource reaches it.

    Span names, status descriptions, attribute values (span, event, link, resource)
    are scrubbed with the rules of :func:`redact_attributes`. Spans that need no
    masking are passed through unchanged, so the cost is one regex scan per string.
    """

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self._resource_cache: tuple[Resource, Resource] | None = None

    def _resource(self, resource: Resource) -> Resource:
        # One provider has one resource: cache its redacted copy instead of re-scanning.
        cached = self._resource_cache
        if cached is not None and cached[0] is resource:
            return cached[1]
        attrs = _redacted_or_none(resource.attributes)
        redacted = resource if attrs is None else Resource(attrs, resource.schema_url)
        self._resource_cache = (resource, redacted)
        return redacted

    def _is_clean(self, span: ReadableSpan, resource: Resource) -> bool:
        return (
            resource is span.resource
            and not _has_secret(span.attributes)
            and not _needs_masking(span.name)
            and not _needs_masking(span.status.description or "")
            and not any(_has_secret(e.attributes) or _needs_masking(e.name) for e in span.events)
            and not any(_has_secret(link.attributes) for link in span.links)
        )

    def redact(self, span: ReadableSpan) -> ReadableSpan:
        """Return ``span`` itself when clean, else a masked copy."""
        resource = self._resource(span.resource)
        if self._is_clean(span, resource):
            return span
        status = span.status
        if status.description:
            status = Status(status.status_code, redact_text(status.description))
        return _RedactedSpan(
            span,
            name=redact_text(span.name),
            context=span.context,
            parent=span.parent,
            resource=resource,
            attributes=redact_attributes(span.attributes),
            events=[
                Event(redact_text(e.name), redact_attributes(e.attributes), e.timestamp)
                for e in span.events
            ],
            links=[Link(link.context, redact_attributes(link.attributes)) for link in span.links],
            kind=span.kind,
            status=status,
            start_time=span.start_time,
            end_time=span.end_time,
            instrumentation_scope=span.instrumentation_scope,
        )

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Redact, then hand the batch to the wrapped exporter."""
        return self.inner.export([self.redact(span) for span in spans])

    def shutdown(self) -> None:
        """Shut the wrapped exporter down."""
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Flush the wrapped exporter."""
        return self.inner.force_flush(timeout_millis)
