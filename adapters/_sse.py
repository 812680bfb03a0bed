"""The pure server-sent-events parser: event streams read in linear time, within limits.

:class:`EventStreamDecoder` turns the bytes of a ``text/event-stream`` body, in chunks
of any size, into the ``data`` of each complete event (lines end in ``\\r\\n``, ``\\n``
or ``\\r``, split anywhere; an empty line ends an event; its ``data`` lines join with
``\\n``; comments and other fields are skipped). Each byte is scanned once (by
``bytes.splitlines``) and copied a bounded number of times, so one 20 MB event costs
what 20 MB of small ones do; a reader that appends each chunk to a buffer and scans it
again is quadratic in the size of one event. Past ``max_event_bytes`` (one event) or
``max_body_bytes`` (the whole body) it raises :class:`~budgetmix.ResponseFormatError`
naming the limit. Nothing here does I/O; the HTTP transport's recorder
(:class:`~budgetmix.adapters._streams.EventStreamTap`) feeds it.
"""

from __future__ import annotations

import json
from typing import Any

from budgetmix.exceptions import ResponseFormatError

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_EVENT_BYTES",
    "EventStreamDecoder",
    "limit_error",
    "read_json",
    "unreadable_event",
]

#: Default cap on one server-sent event (its data lines together), in bytes.
DEFAULT_MAX_EVENT_BYTES = 16 * 1024 * 1024
#: Default cap on one response body (whole or streamed), in bytes.
DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024

_DECODE_JSON = json.JSONDecoder().decode


def read_json(data: bytes | str) -> Any:
    """``json.loads``, minus its per-call dispatch for UTF-8 (what JSON on the wire is);
    anything else (UTF-16/32) takes ``json.loads`` and its encoding detection.

    Raises:
        ValueError: not JSON.
        RecursionError: JSON that nests too deep to read.
    """
    try:
        return _DECODE_JSON(data.decode("utf-8-sig") if isinstance(data, bytes) else data)
    except ValueError:
        return json.loads(data)  # raises again when it is not JSON in any encoding


def limit_error(what: str, name: str, limit: int) -> ResponseFormatError:
    """The error for a response past one of the transport's size limits."""
    return ResponseFormatError(
        f"the provider's response could not be read: {what} is over {name}={limit} bytes; "
        f"pass a larger {name} to BudgetTransport / AsyncBudgetTransport to accept it"
    )


def unreadable_event(why: str) -> ResponseFormatError:
    """The error for a streamed event that cannot be read (``why``: what it has)."""
    return ResponseFormatError(f"the provider's response could not be read: a streamed event {why}")


class EventStreamDecoder:
    """Server-sent events, incrementally: :meth:`feed` bytes, get each completed event's data.

    Holds at most one unfinished line (as the pieces that arrived) and the data lines of
    one unfinished event, never the stream.
    """

    __slots__ = ("_body", "_cr", "_data", "_event", "_line", "_line_size", "max_body", "max_event")

    def __init__(self, max_event_bytes: int, max_body_bytes: int) -> None:
        self.max_event = max_event_bytes
        self.max_body = max_body_bytes
        self._body = 0  # bytes fed so far
        self._cr = False  # the last chunk ended in "\r": a "\n" opening the next belongs to it
        self._line: list[bytes] = []  # pieces of a line not ended yet
        self._line_size = 0
        self._data: list[bytes] = []  # data lines of the event not ended yet
        self._event = 0  # their size

    def feed(self, chunk: bytes) -> list[bytes]:
        """The data of each event ``chunk`` completes, in order (often none).

        Raises:
            ResponseFormatError: an event or the body is over its limit.
        """
        self._body += len(chunk)
        if self._body > self.max_body:
            raise limit_error("the response body", "max_body_bytes", self.max_body)
        if self._cr:
            self._cr = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if not chunk:
            return []
        last = chunk[-1]
        lines = chunk.splitlines()  # at "\r\n", "\n" and "\r", in one C pass
        tail = None
        if last == 13:  # "\r"
            self._cr = True
        elif last != 10:  # not "\n" either: the last line goes on in the next chunk
            tail = lines.pop()
        events = self._take(lines) if lines else []
        if tail is not None:  # kept as a piece: nothing is scanned or copied again
            self._line.append(tail)
            self._line_size += len(tail)
            if self._event + self._line_size > self.max_event:
                raise limit_error("one event", "max_event_bytes", self.max_event)
        return events

    def _take(self, lines: list[bytes]) -> list[bytes]:
        """Fold complete ``lines`` in; the data of the events they end."""
        if self._line:  # the first line began in earlier chunks: join its pieces once
            self._line.append(lines[0])
            lines[0] = b"".join(self._line)
            self._line, self._line_size = [], 0
        events: list[bytes] = []
        data = self._data
        for line in lines:
            if not line:  # an empty line ends the event
                if data:
                    events.append(data[0] if len(data) == 1 else b"\n".join(data))
                    data.clear()
                    self._event = 0
                continue
            if line.startswith(b"data: "):
                value = line[6:]
            elif line.startswith(b"data:"):
                value = line[5:]
            elif line == b"data":
                value = b""
            else:  # a comment (":..."), "event:", "id:", "retry:": nothing for the budget,
                if not line.isascii():  # but the client decodes it as UTF-8 too
                    try:
                        line.decode("utf-8")
                    except UnicodeDecodeError:
                        raise unreadable_event("has a line that is not UTF-8") from None
                continue
            self._event += len(value)
            if self._event > self.max_event:
                raise limit_error("one event", "max_event_bytes", self.max_event)
            data.append(value)
        return events
