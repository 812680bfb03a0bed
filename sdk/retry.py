"""Retries of transient provider errors: one I/O-free decision core, two thin drivers.

:class:`RetryState` decides, after each failed attempt, how long to wait before the
next one or whether to give up (like tenacity's ``iter``, it never sleeps or calls);
:func:`call_with_retry` and :func:`acall_with_retry` are the sync and async loops
over it. Retries never consume turns (see :class:`~budgetmix.AccountingPolicy`) but
do consume wall time, so the core gives up rather than wait past the episode's
wall-clock budget. Every retry is reported through ``on_retry`` (the episode turns it
into a span event) before the wait. Tests inject ``sleep`` (``sleep=list.append``).
What an exception means (transient or not) is :mod:`budgetmix.provider_errors`'.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from budgetmix._validate import check_bool, check_int, check_number
from budgetmix.provider_errors import TransientInfo, classify_exception

__all__ = [
    "MAX_ATTEMPTS",
    "MAX_DELAY_SECONDS",
    "MAX_MULTIPLIER",
    "Classifier",
    "OnRetry",
    "RetryPolicy",
    "RetryState",
    "acall_with_retry",
    "call_with_retry",
]

T = TypeVar("T")


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
        # a multiplier below 1 is a shrinking backoff: faster retries the busier the server
        for name, minimum, maximum in (
            ("initial_delay", 0.0, MAX_DELAY_SECONDS),
            ("max_delay", 0.0, MAX_DELAY_SECONDS),
            ("multiplier", 1.0, MAX_MULTIPLIER),
            ("jitter", 0.0, 1.0),
        ):
            value = getattr(self, name)
            value = check_number(f"RetryPolicy.{name}", value, minimum=minimum, maximum=maximum)
            object.__setattr__(self, name, value)
        check_bool("RetryPolicy.honour_retry_after", self.honour_retry_after)

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
WallLeft = Callable[[], float | None]


def _no_wall_limit() -> float | None:
    return None


class RetryState:
    """The retry decisions of one call: after each failure, wait how long, or give up.

    I/O-free: it reads the wall budget left through ``wall_left`` and draws jitter from
    ``rng``, but never sleeps, calls or reports; the drivers do.

    Attributes:
        attempt: attempts made and failed so far.
    """

    __slots__ = ("_classifier", "_policy", "_rng", "_wall_left", "attempt")

    def __init__(
        self,
        policy: RetryPolicy,
        *,
        classifier: Classifier = classify_exception,
        wall_left: WallLeft = _no_wall_limit,
        rng: random.Random | None = None,
    ) -> None:
        self._policy = policy
        self._classifier = classifier
        self._wall_left = wall_left
        self._rng = rng
        self.attempt = 0

    def after_failure(self, exc: BaseException) -> float | None:
        """The attempt just made failed with ``exc``: seconds to wait before the next one,
        or ``None`` to give up (a permanent error, the last attempt, or a wait that would
        pass the wall budget left)."""
        self.attempt += 1
        if self.attempt >= self._policy.max_attempts:
            return None
        info = self._classifier(exc)
        if not info.transient:
            return None
        if self._rng is None:
            self._rng = random.Random()
        delay = self._policy.delay(self.attempt, info, self._rng)
        left = self._wall_left()
        return None if left is not None and delay >= left else delay


def call_with_retry(
    fn: Callable[[], T],
    policy: RetryPolicy,
    *,
    wall_left: WallLeft = _no_wall_limit,
    on_retry: OnRetry | None = None,
    classifier: Classifier = classify_exception,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
    first_failure: Exception | None = None,
) -> T:
    """Call ``fn`` and retry transient failures; the last exception propagates.

    ``first_failure``: the caller already made attempt 1 and it raised this.
    ``on_retry(attempt, exc, delay)`` runs before each wait; what it raises propagates.
    """
    failure = first_failure
    if failure is None:
        try:
            return fn()  # the common case: no retry state is built
        except Exception as exc:
            failure = exc
    state = RetryState(policy, classifier=classifier, wall_left=wall_left, rng=rng)
    while True:
        delay = state.after_failure(failure)
        if delay is None:
            raise failure
        if on_retry is not None:
            on_retry(state.attempt, failure, delay)
        sleep(delay)
        try:
            return fn()
        except Exception as exc:
            failure = exc


async def acall_with_retry(
    fn: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    *,
    wall_left: WallLeft = _no_wall_limit,
    on_retry: OnRetry | None = None,
    classifier: Classifier = classify_exception,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    rng: random.Random | None = None,
    first_failure: Exception | None = None,
) -> T:
    """Async twin of :func:`call_with_retry`: the same :class:`RetryState`, awaited."""
    failure = first_failure
    if failure is None:
        try:
            return await fn()
        except Exception as exc:
            failure = exc
    state = RetryState(policy, classifier=classifier, wall_left=wall_left, rng=rng)
    while True:
        delay = state.after_failure(failure)
        if delay is None:
            raise failure
        if on_retry is not None:
            on_retry(state.attempt, failure, delay)
        await sleep(delay)
        try:
            return await fn()
        except Exception as exc:
            failure = exc
