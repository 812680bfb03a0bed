"""Log redaction: the records of the HTTP and provider SDK loggers, masked with
:func:`budgetmix.telemetry.redaction.redact_text` before any handler sees them."""

from __future__ import annotations

import logging
from typing import Any

from budgetmix.telemetry.redaction import redact_text

__all__ = ["REDACTED_LOGGERS", "RedactingLogFilter", "redact_log_records"]

#: Loggers whose records are redacted once :func:`redact_log_records` ran (and their
#: children): the HTTP clients and the provider SDKs, which log URLs and headers.
REDACTED_LOGGERS = frozenset(
    {"httpx", "httpx2", "httpcore", "h11", "h2", "urllib3", "requests", "openai", "anthropic"}
)


def _redact_record(record: logging.LogRecord) -> None:
    try:
        message = record.getMessage()
    except Exception:  # a record whose arguments do not format: left to logging
        return
    masked = redact_text(message)
    if masked is not message and masked != message:
        record.msg, record.args = masked, None


class RedactingLogFilter(logging.Filter):
    """A logging filter that masks credentials in every record it sees (attach it to
    your own handlers to cover any logger); it never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Mask the record's message in place; keep the record."""
        _redact_record(record)
        return True


_installed: list[bool] = []


def redact_log_records() -> None:
    """Mask credentials in every record of the :data:`REDACTED_LOGGERS` (and their
    children, such as ``httpx``'s INFO line with a request URL and its query string)
    from now on; idempotent. budgetmix calls it when a transport or a budgeted client
    is built. It wraps the log record factory, so it holds wherever the records go."""
    if _installed:
        return
    _installed.append(True)
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        if record.name.partition(".")[0] in REDACTED_LOGGERS:
            _redact_record(record)
        return record

    logging.setLogRecordFactory(factory)
