"""Retries of transient provider errors, built on tenacity.

Retries never consume turns (see :class:`~budgetmix.AccountingPolicy`) but do
consume wall time, so the retry loop gives up rather than sleep past the
episode's wall-clock budget. Every retry is reported through ``on_retry``
(the controller turns it into a span event). Tests inject ``sleep``.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import tenacity
from budgetmix._validate import check_int, check_number, shown
from budgetmix.exceptions import ConfigError

__all__ = [
    "MAX_ATTEMPTS",
    "MAX_DELAY_SECONDS",
    "MAX_MULTIPLIER",
    "RetryPolicy",
    "TransientInfo",
    "acall_with_retry",
    "call_with_retry",
    "classify_exception",
]

T = TypeVar("T")
_TRANSIENT_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})


@dataclass(frozen=True, slots=True)
class TransientInfo:
    """Whether an exception is worth retrying, and the server's Retry-After if given."""

    transient: bool
    status_code: int | None = None
    retry_after: float | None = None


def _header(headers: Any, name: str) -> Any:
    # httpx.Headers is case-insensitive; a plain dict (test doubles, other clients) is not
    value = headers.get(name)
    if value is None and isinstance(headers, dict):
        value = next((v for k, v in headers.items() if str(k).lower() == name), None)
    return value


def _retry_after(headers: Any) -> float | None:
    if headers is None:
        return None
    try:
        ms = _header(headers, "retry-after-ms")
        if ms is not None:
            return max(0.0, float(ms) / 1000.0)
        raw = _header(headers, "retry-after")
    except (AttributeError, TypeError, ValueError):
        return None
    if raw is None:
        return None
    try:
        seconds = float(raw)
    except (TypeError, ValueError):
        # an HTTP date; a malformed one must not turn a retryable error into a crash
        try:
            parsed = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        return max(0.0, parsed.timestamp() - time.time())
    return max(0.0, seconds) if math.isfinite(seconds) else None


def classify_exception(exc: BaseException) -> TransientInfo:
    """Classify an exception from any provider SDK or httpx without importing them.

    Transient: HTTP 408/409/425/429/5xx/529, timeouts, connection errors/resets.
    """
    name = type(exc).__name__
    response = getattr(exc, "response", None)
    status = getattr(exc, "status_code", None)
    if status is None and response is not None:
        status = getattr(response, "status_code", None)
    headers = getattr(response, "headers", None) if response is not None else None
    if isinstance(status, int):
        transient = status in _TRANSIENT_STATUS or status >= 500
        return TransientInfo(transient, status, _retry_after(headers) if transient else None)
    if isinstance(exc, TimeoutError | ConnectionError):
        return TransientInfo(True)
    transient_names = (
        "Timeout",
        "ConnectError",
        "ConnectionError",
        "APIConnectionError",
        "APITimeoutError",
        "RemoteProtocolError",
        "ReadError",
        "WriteError",
    )
    return TransientInfo(any(n in name for n in transient_names))


#: The most attempts a :class:`RetryPolicy` may make, and the longest one wait (1 hour).
MAX_ATTEMPTS = 1000
MAX_DELAY_SECONDS = 3600.0
#: The largest growth factor per attempt.
MAX_MULTIPLIER = 100.0


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """Exponential backoff with jitter for transient provider errors.

    Attributes:
        max_attempts: total attempts including the first (1 = no retries), an int in
            ``[1, MAX_ATTEMPTS]``.
        initial_delay: seconds before the first retry, in ``[0, MAX_DELAY_SECONDS]``.
        max_delay: cap of one wait before jitter, in ``[0, MAX_DELAY_SECONDS]``.
        multiplier: growth per attempt, in ``[1, MAX_MULTIPLIER]``.
        jitter: fraction of the delay added at random (0..jitter), in ``[0, 1]``.
        honour_retry_after: use the server's Retry-After (capped at ``max_delay``)
            when it is longer.

    Raises:
        ConfigError: a field of the wrong type (a bool is not a number), NaN, infinite
            or out of its range; the message names the field.
    """

    max_attempts: int = 4
    initial_delay: float = 0.5
    max_delay: float = 30.0
    multiplier: float = 2.0
    jitter: float = 0.25
    honour_retry_after: bool = True

    def __post_init__(self) -> None:
        check_int("RetryPolicy.max_attempts", self.max_attempts, minimum=1, maximum=MAX_ATTEMPTS)
        for name, maximum in (
            ("initial_delay", MAX_DELAY_SECONDS),
            ("max_delay", MAX_DELAY_SECONDS),
            ("multiplier", MAX_MULTIPLIER),
            ("jitter", 1.0),
        ):
            value = check_number(f"RetryPolicy.{name}", getattr(self, name), maximum=maximum)
            object.__setattr__(self, name, value)
        if self.multiplier < 1:  # a shrinking backoff retries faster the busier the server
            raise ConfigError(f"RetryPolicy.multiplier must be >= 1, got {self.multiplier!r}")
        if not isinstance(self.honour_retry_after, bool):
            raise ConfigError(
                f"RetryPolicy.honour_retry_after must be true or false, "
                f"got {shown(self.honour_retry_after)}"
            )

    def delay(self, attempt: int, info: TransientInfo, rng: random.Random) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based): finite, at
        most ``max_delay * (1 + jitter)``, whatever the attempt number."""
        base = self.initial_delay
        if base > 0 and attempt > 1:
            try:
                base = min(self.max_delay, base * self.multiplier ** (attempt - 1))
            except OverflowError:  # a float power past 1e308 raises instead of giving inf
                base = self.max_delay
        else:
            base = min(self.max_delay, base)
        base += base * self.jitter * rng.random()
        if self.honour_retry_after and info.retry_after is not None:
            base = max(base, min(info.retry_after, self.max_delay))
        return base


OnRetry = Callable[[int, BaseException, float], None]
Classifier = Callable[[BaseException], TransientInfo]


def _retrying_kwargs(
    policy: RetryPolicy,
    *,
    wall_left: Callable[[], float | None],
    on_retry: OnRetry | None,
    classifier: Classifier,
    rng: random.Random,
) -> dict[str, Any]:
    def wait(rs: tenacity.RetryCallState) -> float:
        exc = rs.outcome.exception() if rs.outcome else None
        info = classifier(exc) if exc is not None else TransientInfo(False)
        return policy.delay(rs.attempt_number, info, rng)

    def stop(rs: tenacity.RetryCallState) -> bool:
        if rs.attempt_number >= policy.max_attempts:
            return True
        left = wall_left()
        # tenacity computes the wait before asking stop: never sleep past the wall budget
        return left is not None and rs.upcoming_sleep >= left

    def before_sleep(rs: tenacity.RetryCallState) -> None:
        if on_retry is not None and rs.outcome is not None:
            exc = rs.outcome.exception()
            if exc is not None:
                on_retry(rs.attempt_number, exc, rs.upcoming_sleep)

    def should_retry(exc: BaseException) -> bool:
        return classifier(exc).transient

    return {
        "stop": stop,
        "wait": wait,
        "retry": tenacity.retry_if_exception(should_retry),
        "before_sleep": before_sleep,
        "reraise": True,
    }


def call_with_retry(
    fn: Callable[[], T],
    policy: RetryPolicy,
    *,
    wall_left: Callable[[], float | None] = lambda: None,
    on_retry: OnRetry | None = None,
    classifier: Classifier = classify_exception,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
    first_failure: Exception | None = None,
) -> T:
    """Call ``fn`` and retry transient failures; the last exception propagates.

    ``first_failure``: the caller already made attempt 1 and it raised this.
    """
    # fast path: a call that succeeds (or fails for good) never builds the retry machinery
    if first_failure is None:
        try:
            return fn()
        except Exception as exc:
            first_failure = exc
    if policy.max_attempts == 1 or not classifier(first_failure).transient:
        raise first_failure
    first: BaseException | None = first_failure

    def attempt() -> T:
        nonlocal first
        if first is not None:  # attempt 1 is the failure above, so counts stay exact
            failed, first = first, None
            raise failed
        return fn()

    kwargs = _retrying_kwargs(
        policy,
        wall_left=wall_left,
        on_retry=on_retry,
        classifier=classifier,
        rng=rng or random.Random(),
    )
    retrying = tenacity.Retrying(sleep=sleep, **kwargs)
    return retrying(attempt)


async def acall_with_retry(
    fn: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    *,
    wall_left: Callable[[], float | None] = lambda: None,
    on_retry: OnRetry | None = None,
    classifier: Classifier = classify_exception,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    rng: random.Random | None = None,
    first_failure: Exception | None = None,
) -> T:
    """Async twin of :func:`call_with_retry` over the same decision code."""
    if first_failure is None:
        try:
            return await fn()
        except Exception as exc:
            first_failure = exc
    if policy.max_attempts == 1 or not classifier(first_failure).transient:
        raise first_failure
    first: BaseException | None = first_failure

    kwargs = _retrying_kwargs(
        policy,
        wall_left=wall_left,
        on_retry=on_retry,
        classifier=classifier,
        rng=rng or random.Random(),
    )
    retrying = tenacity.AsyncRetrying(sleep=sleep, **kwargs)

    # tenacity awaits only what it recognises as a coroutine function; a lambda or
    # bound method returning an awaitable would come back un-awaited (and unretried)
    async def attempt() -> T:
        nonlocal first
        if first is not None:
            failed, first = first, None
            raise failed
        return await fn()

    result: T = await retrying(attempt)
    return result
