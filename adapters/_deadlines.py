"""Every read of a response body is bounded by the episode: the wall budget, an idle and a
total read deadline.

A server that trickles (one byte every half second) defeats a client's read timeout,
which waits for the next byte only. A :class:`ReadDeadline` is armed when a budgeted
response's body starts to be read: it is due at the first of the episode's wall budget
running out, ``idle_seconds`` after the last chunk and ``total_seconds`` after the
start. One watchdog thread (:class:`_Watchdog`, started on first use) cuts the
connection when a deadline is due: it shuts the response's socket down, so a blocked
read returns at once, and the reader raises :meth:`ReadDeadline.error` instead of the
I/O error that follows: :class:`~budgetmix.BudgetExhausted` on ``wall_seconds`` when the
wall budget ran out, else a non-retryable :class:`~budgetmix.ProviderError` naming the
deadline. Where there is no socket to cut (an in-process transport), the next chunk
raises it. Nothing here reads a body; :mod:`budgetmix.adapters._streams` calls it.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, Protocol, TypeVar

from budgetmix.episode import Episode
from budgetmix.exceptions import BudgetExhausted, ProviderError

__all__ = [
    "DEFAULT_READ_IDLE_SECONDS",
    "DEFAULT_READ_TOTAL_SECONDS",
    "ReadDeadline",
    "abounded",
    "bounded",
    "socket_of",
    "watch_sdk_client",
]

T = TypeVar("T")

#: Default most seconds between two chunks of a response body.
DEFAULT_READ_IDLE_SECONDS = 60.0
#: Default most seconds to read one response body, whole or streamed.
DEFAULT_READ_TOTAL_SECONDS = 600.0


class _Socket(Protocol):
    def shutdown(self, how: int, /) -> None: ...


def socket_of(response: Any) -> _Socket | None:
    """The socket an httpx / httpx2 response is read from, if it has one (a
    ``socket.socket``, or asyncio's ``TransportSocket`` around one)."""
    extensions = getattr(response, "extensions", None)
    stream = extensions.get("network_stream") if isinstance(extensions, dict) else None
    if stream is None:
        return None
    try:
        sock = stream.get_extra_info("socket")
    except Exception:  # a network stream of another kind
        return None
    return sock if callable(getattr(sock, "shutdown", None)) else None


class ReadDeadline:
    """When one body's reading must end, and why it ended, once it did."""

    __slots__ = ("_sock", "episode", "expired", "idle", "last", "total_at", "wall_at")

    def __init__(
        self,
        episode: Episode | None,
        *,
        idle_seconds: float = DEFAULT_READ_IDLE_SECONDS,
        total_seconds: float = DEFAULT_READ_TOTAL_SECONDS,
        sock: _Socket | None = None,
    ) -> None:
        now = time.monotonic()
        self.episode = episode
        left = episode.ledger.wall_left() if episode is not None else None
        self.wall_at = None if left is None else now + left
        self.total_at = now + total_seconds
        self.idle = idle_seconds
        self.last = now
        self.expired: str | None = None  # "wall_seconds", "idle" or "total" once due
        self._sock = sock
        if sock is not None:
            _watchdog().arm(self)

    def due(self) -> float:
        """The monotonic time the reading must end by."""
        due = min(self.total_at, self.last + self.idle)
        return due if self.wall_at is None else min(due, self.wall_at)

    def touch(self) -> None:
        """A chunk arrived: the idle deadline starts again.

        Raises:
            BudgetExhausted, ProviderError: the deadline is due (see :meth:`error`).
        """
        now = time.monotonic()
        if self.expired is not None or now >= self.due():
            self.expire(now)
            raise self.error()
        self.last = now

    def expire(self, now: float) -> None:
        """Mark the deadline as due (which one) and cut the connection."""
        if self.expired is None:
            if self.wall_at is not None and now >= self.wall_at:
                self.expired = "wall_seconds"
            elif now >= self.total_at:
                self.expired = "total"
            else:
                self.expired = "idle"
        sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def error(self) -> BaseException:
        """What the reader raises once the deadline is due."""
        ep = self.episode
        if self.expired == "wall_seconds" and ep is not None:
            ledger = ep.ledger
            return BudgetExhausted(
                "wall_seconds",
                ledger.counts(),
                ledger.limits(),
                transcript=ep.transcript,
                episode_id=ep.id,
            )
        if self.expired == "total":
            why = "its body took longer than read_total_seconds to arrive"
        else:
            why = f"no byte of its body arrived for read_idle_seconds={self.idle:g}"
        return ProviderError(f"the provider's response was cut off: {why}", retryable=False)

    def done(self) -> None:
        """The body was read (or given up): nothing more to watch, and nothing kept (the
        watchdog may hold this object until it would have been due)."""
        self._sock = None
        self.episode = None

    def attach(self, sock: _Socket | None) -> None:
        """Watch ``sock`` (a response that arrived during the call) from now on."""
        if sock is None:
            return
        self._sock = sock
        if self.expired is not None or time.monotonic() >= self.due():
            self.expire(time.monotonic())
        else:
            _watchdog().arm(self)

    def replaced(self, exc: BaseException) -> BaseException:
        """``exc``, or the deadline's error when it was due (the I/O error the cut made)."""
        if self.expired is None or isinstance(exc, (BudgetExhausted, ProviderError)):
            return exc
        return self.error()


# -- the SDK wrappers' calls: a whole body is read inside the SDK's create -------------
_CALL: ContextVar[ReadDeadline | None] = ContextVar("budgetmix_read_deadline", default=None)


def _on_response(response: Any) -> None:
    deadline = _CALL.get()
    if deadline is not None:
        deadline.attach(socket_of(response))


async def _aon_response(response: Any) -> None:
    _on_response(response)


def watch_sdk_client(resource: Any) -> None:
    """Let the calls of :func:`bounded` reach the sockets of an SDK client (a resource
    such as ``client.chat.completions``, or the client): a response hook on its HTTP
    client, added once, which does nothing outside a budgeted call."""
    http = resource
    for _ in range(3):
        if isinstance(getattr(http, "event_hooks", None), dict):
            break
        http = getattr(http, "_client", None)
    else:
        return
    hooks = http.event_hooks.get("response")
    if not isinstance(hooks, list) or any(h in (_on_response, _aon_response) for h in hooks):
        return
    hooks.append(_aon_response if type(http).__name__.startswith("Async") else _on_response)


def bounded(episode: Episode, call: Callable[[], T]) -> Callable[[], T]:
    """``call`` (an SDK's ``create``, which reads the whole body) within a read deadline:
    the episode's wall budget and the default idle and total deadlines."""

    def run() -> T:
        deadline = ReadDeadline(episode)
        token = _CALL.set(deadline)
        try:
            return call()
        except Exception as exc:
            raised = deadline.replaced(exc)
            if raised is exc:
                raise
            raise raised from exc
        finally:
            deadline.done()
            _CALL.reset(token)

    return run


def abounded(episode: Episode, call: Callable[[], Awaitable[T]]) -> Callable[[], Awaitable[T]]:
    """The async twin of :func:`bounded`."""

    async def run() -> T:
        deadline = ReadDeadline(episode)
        token = _CALL.set(deadline)
        try:
            return await call()
        except Exception as exc:
            raised = deadline.replaced(exc)
            if raised is exc:
                raise
            raise raised from exc
        finally:
            deadline.done()
            _CALL.reset(token)

    return run


class _Watchdog:
    """One daemon thread that expires due deadlines (a heap of them, earliest first)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, ReadDeadline]] = []
        self._order = itertools.count()
        self._wake = threading.Condition()
        threading.Thread(target=self._run, name="budgetmix-read-deadlines", daemon=True).start()

    def arm(self, deadline: ReadDeadline) -> None:
        due = deadline.due()
        with self._wake:
            # Wake the thread only when its timed wait would end too late: a deadline due
            # after the earliest one is found when the thread wakes for that one. (Waking it
            # for every read made it contend with the caller for the GIL on each request.)
            earliest = not self._heap or due < self._heap[0][0]
            heapq.heappush(self._heap, (due, next(self._order), deadline))
            if earliest:
                self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._heap:
                    self._wake.wait()
                due, _, deadline = self._heap[0]
                now = time.monotonic()
                if due > now:
                    self._wake.wait(due - now)
                    continue
                heapq.heappop(self._heap)
            if deadline._sock is None:  # read already, or cut
                continue
            later = deadline.due()
            if later > time.monotonic():  # a chunk came meanwhile: watch again
                self.arm(deadline)
                continue
            deadline.expire(time.monotonic())


_WATCHDOG: list[_Watchdog] = []
_WATCHDOG_LOCK = threading.Lock()


def _watchdog() -> _Watchdog:
    if not _WATCHDOG:
        with _WATCHDOG_LOCK:
            if not _WATCHDOG:
                _WATCHDOG.append(_Watchdog())
    return _WATCHDOG[0]
