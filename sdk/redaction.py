"""Redaction: no credential ever reaches an exported span, event or log."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import Link, Status
from opentelemetry.util.types import Attributes, AttributeValue

__all__ = ["REDACTED", "RedactingSpanExporter", "redact_attributes"]

REDACTED = "[REDACTED]"
# Attribute keys whose whole value is a credential: matched on the end of the key so
# `http.request.header.authorization` and `x-api-key` match, `gen_ai.usage.input_tokens` not.
_SECRET_KEY = re.compile(
    r"(?:^|[._\-])(?:authorization|api[_\-]?key|apikey|secret|password|passwd|"
    r"(?:access|refresh|auth|id|session|bearer)[_\-]token|cookie|private[_\-]key)$",
    re.IGNORECASE,
)
# Credentials recognisable by their shape, wherever they appear inside a string.
_SECRET_VALUE = re.compile(
    r"\bsk-[A-Za-z0-9_\-]{8,}"  # OpenAI (sk-, sk-proj-) and Anthropic (sk-ant-) keys
    r"|\b[Bb]earer\s+[A-Za-z0-9._~+/=\-]{8,}"
    r"|\bgh[pousr]_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}"
    r"|\bhf_[A-Za-z0-9]{20,}|\bxox[abprs]-[A-Za-z0-9\-]{10,}"
    r"|\bAKIA[0-9A-Z]{16}\b|\bAIza[0-9A-Za-z_\-]{30,}"
)


def _scrub_text(text: str) -> str:
    return _SECRET_VALUE.sub(REDACTED, text)


def _scrub_value(value: AttributeValue) -> AttributeValue:
    if isinstance(value, str):
        return _scrub_text(value)
    if isinstance(value, Sequence) and any(isinstance(v, str) for v in value):
        return tuple(_scrub_text(v) if isinstance(v, str) else v for v in value)
    return value


@functools.lru_cache(maxsize=4096)
def _is_secret_key(key: str) -> bool:
    # Spans repeat the same few keys: cache the verdict instead of re-running the regex.
    return _SECRET_KEY.search(key) is not None


def redact_attributes(attributes: Attributes) -> dict[str, AttributeValue]:
    """Return a copy of ``attributes`` with credentials masked as :data:`REDACTED`.

    A key named like a credential (``authorization``, ``api_key``, ``x-api-key``,
    ``*_secret``, ``password``, ``*_token`` other than usage counts, ``cookie``) has
    its whole value replaced; inside any other string value, substrings shaped like
    keys (``sk-...``, ``sk-ant-...``, ``Bearer ...``, GitHub/HF/Slack/AWS/Google
    tokens) are replaced. Never raises.
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
            if _SECRET_VALUE.search(value):
                return True
        elif isinstance(value, Sequence) and any(
            isinstance(v, str) and _SECRET_VALUE.search(v) for v in value
        ):
            return True
    return False


def _redacted_or_none(attributes: Attributes) -> dict[str, AttributeValue] | None:
    """The redacted copy, or None when nothing needs masking (the common, copy-free case)."""
    return redact_attributes(attributes) if _has_secret(attributes) else None


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
            and not _SECRET_VALUE.search(span.name)
            and not _SECRET_VALUE.search(span.status.description or "")
            and not any(
                _has_secret(e.attributes) or _SECRET_VALUE.search(e.name) for e in span.events
            )
            and not any(_has_secret(link.attributes) for link in span.links)
        )

    def redact(self, span: ReadableSpan) -> ReadableSpan:
        """Return ``span`` itself when clean, else a masked copy."""
        resource = self._resource(span.resource)
        if self._is_clean(span, resource):
            return span
        status = span.status
        if status.description:
            status = Status(status.status_code, _scrub_text(status.description))
        return _RedactedSpan(
            span,
            name=_scrub_text(span.name),
            context=span.context,
            parent=span.parent,
            resource=resource,
            attributes=redact_attributes(span.attributes),
            events=[
                Event(_scrub_text(e.name), redact_attributes(e.attributes), e.timestamp)
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


# ---------------------------------------------------------------- JSONL
