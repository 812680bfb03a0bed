"""Retries of transient provider errors, run by tenacity with budgetmix's rules as its strategies.

:func:`call_with_retry` and :func:`acall_with_retry` make the first attempt themselves
(a success builds nothing) and hand a failure to a ``tenacity.Retrying`` /
``tenacity.AsyncRetrying`` built from :class:`RetryPolicy` and four strategies:

- :class:`RetryIfTransient`: retry what the classifier calls transient
  (:func:`~budgetmix.provider_errors.classify_exception`, the one classification);
- :class:`WaitBackoff` (exponential backoff with jitter) under :class:`WaitRetryAfter`,
  which honours the server's ``Retry-After``;
- :class:`StopBeforeWallBudget`: tenacity's ``stop_before_delay`` on the ledger's clock,
  so no wait runs past the episode's wall budget; it is always added to the stop, so
  the budget wins over any user strategy;
- ``before_sleep`` calls ``on_retry`` (the episode charges the retry when retries
  count and puts a ``budgetmix.retry`` event on the turn's span) before each wait.

Retries never consume turns unless :class:`~budgetmix.AccountingPolicy` says so. Tests
inject ``sleep`` (``sleep=list.append``); a cancelled wait (``asyncio`` cancellation,
``KeyboardInterrupt``) propagates and ends the turn, and only an ``Exception`` is ever
retried, never a :class:`~budgetmix.BudgetExhausted`.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from budgetmix._validate import (
    check_bool,
    check_instance,
    check_int,
    check_keys,
    check_mapping,
    check_number,
)
from budgetmix.exceptions import BudgetExhausted, ConfigError
from budgetmix.provider_errors import TransientInfo, classify_exception
from tenacity import AsyncRetrying, BaseRetrying, DoSleep, RetryCallState, Retrying
from tenacity.retry import RetryBaseT, retry_base
from tenacity.stop import StopBaseT, stop_after_attempt, stop_any, stop_base
from tenacity.wait import WaitBaseT, wait_base

__all__ = [
    "MAX_ATTEMPTS",
    "MAX_DELAY_SECONDS",
    "MAX_MULTIPLIER",
    "Classifier",
    "OnRetry",
    "RetryIfTransient",
    "RetryPolicy",
    "RetryState",
    "StopBeforeWallBudget",
    "WaitBackoff",
    "WaitRetryAfter",
    "acall_with_retry",
    "call_with_retry",
]

T = TypeVar("T")


#: The most attempts a :class:`RetryPolicy` may make, and the longest one wait (1 hour).
MAX_ATTEMPTS = 1000
MAX_DELAY_SECONDS = 3600.0
#: The largest growth factor per attempt.
MAX_MULTIPLIER = 100.0
_NUMBERS = ("max_attempts", "initial_delay", "max_delay", "multiplier", "jitter")
_CONFIG_KEYS = (*_NUMBERS, "honour_retry_after")
_STRATEGIES = ("stop", "wait", "retry", "template")


def _longer_retry_after(delay: float, retry_after: float | None, cap: float) -> float:
    """``delay``, or the server's ``retry_after`` (capped at ``cap``) when longer."""
    return delay if retry_after is None else max(delay, min(retry_after, cap))


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """Exponential backoff with jitter for transient provider errors, or tenacity's own
    strategies; either way the episode's wall budget stops a wait it cannot cover.

    Attributes:
        max_attempts: total attempts including the first (1 = no retries), an int in
            ``[1, MAX_ATTEMPTS]``.
        initial_delay: seconds before the first retry, in ``[0, MAX_DELAY_SECONDS]``.
        max_delay: cap of one wait before jitter, in ``[0, MAX_DELAY_SECONDS]``.
        multiplier: growth per attempt, in ``[1, MAX_MULTIPLIER]``.
        jitter: fraction of the delay added at random (0..jitter), in ``[0, 1]``.
        honour_retry_after: use the server's Retry-After (capped at ``max_delay``)
            when it is longer, whatever the wait strategy.
        stop: a tenacity stop strategy in place of ``max_attempts``
            (``stop_after_attempt(3) | stop_after_delay(20)``).
        wait: a tenacity wait strategy in place of the backoff above.
        retry: a tenacity retry strategy in place of the transient-error check. It
            sees failures only (a successful attempt ends the call) and never gets a
            ``BaseException`` that is not an ``Exception`` nor a ``BudgetExhausted``.
        template: a ``tenacity.Retrying`` (or ``AsyncRetrying``) whose ``stop``,
            ``wait``, ``retry``, ``before``, ``after`` and ``before_sleep`` are used
            where the three fields above are ``None`` (its ``sleep`` and ``reraise``
            are budgetmix's: the caller's sleep, the last exception raised).

    Raises:
        ConfigError: a field of the wrong type (a bool is not a number), NaN, infinite
            or out of its range, a strategy that is not callable, or a template with a
            ``retry_error_callback`` (a final failure is raised and recorded); the
            message names the field.
    """

    max_attempts: int = 4
    initial_delay: float = 0.5
    max_delay: float = 30.0
    multiplier: float = 2.0
    jitter: float = 0.25
    honour_retry_after: bool = True
    stop: StopBaseT | None = None
    wait: WaitBaseT | None = None
    retry: RetryBaseT | None = None
    template: BaseRetrying | None = None

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
        for name in ("stop", "wait", "retry"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise ConfigError(
                    f"RetryPolicy.{name} must be a tenacity {name} strategy (a callable of "
                    f"RetryCallState), got {type(value).__name__}"
                )
        if self.template is not None:
            check_instance(
                "RetryPolicy.template", self.template, BaseRetrying, "a tenacity Retrying"
            )
            if self.template.retry_error_callback is not None:
                raise ConfigError(
                    "RetryPolicy.template.retry_error_callback is not supported: a final "
                    "failure is raised and recorded as the turn's provider error"
                )

    def backoff(self, attempt: int, rng: random.Random) -> float:
        """The exponential wait after failed attempt number ``attempt`` (1-based) with its
        jitter: finite, at most ``max_delay * (1 + jitter)``, whatever the attempt number."""
        base = self.initial_delay
        if base > 0 and attempt > 1:
            try:
                base = min(self.max_delay, base * self.multiplier ** (attempt - 1))
            except OverflowError:  # a float power past 1e308 raises instead of giving inf
                base = self.max_delay
        else:
            base = min(self.max_delay, base)
        return base + base * self.jitter * rng.random()

    def delay(self, attempt: int, info: TransientInfo, rng: random.Random) -> float:
        """Seconds to wait after failed attempt number ``attempt`` of a failure classified
        as ``info``: :meth:`backoff`, or the server's Retry-After when honoured and longer."""
        delay = self.backoff(attempt, rng)
        if not self.honour_retry_after:
            return delay
        return _longer_retry_after(delay, info.retry_after, self.max_delay)

    def to_config(self) -> dict[str, Any]:
        """The policy as a config mapping; :meth:`from_config` inverts it.

        Raises:
            ConfigError: a tenacity strategy is set (it has no config form); the message
                names the field.
        """
        for name in _STRATEGIES:
            if getattr(self, name) is not None:
                raise ConfigError(f"RetryPolicy.{name} is a tenacity object: no config form")
        return {name: getattr(self, name) for name in _CONFIG_KEYS}

    @classmethod
    def from_config(cls, config: Any) -> RetryPolicy:
        """A policy from :meth:`to_config`'s mapping (any subset of its keys).

        Raises:
            ConfigError: not a mapping, an unknown key, or a bad value; names the field.
        """
        values = check_mapping("RetryPolicy config", config)
        check_keys("RetryPolicy", values, _CONFIG_KEYS)
        return cls(**values)


OnRetry = Callable[[int, BaseException, float], None]
Classifier = Callable[[BaseException], TransientInfo]
WallLeft = Callable[[], float | None]


def _no_wall_limit() -> float | None:
    return None


def _failure(state: RetryCallState) -> BaseException | None:
    outcome = state.outcome
    return outcome.exception() if outcome is not None and outcome.failed else None


class _Classified:
    """One call's classifier, asked once per failure (by the retry check and the wait)."""

    __slots__ = ("_classifier", "_exc", "_info")

    def __init__(self, classifier: Classifier) -> None:
        self._classifier = classifier
        self._exc: BaseException | None = None
        self._info = TransientInfo(False)

    def __call__(self, exc: BaseException) -> TransientInfo:
        if exc is not self._exc:
            self._exc, self._info = exc, self._classifier(exc)
        return self._info


class RetryIfTransient(retry_base):
    """Retry a failed attempt whose exception ``classify`` calls transient."""

    def __init__(self, classify: Classifier = classify_exception) -> None:
        self._classify = classify

    def __call__(self, retry_state: RetryCallState) -> bool:
        """Whether to retry the attempt that just ended."""
        exc = _failure(retry_state)
        return isinstance(exc, Exception) and self._classify(exc).transient


class _Retriable(retry_base):
    """A user's retry strategy, asked only about failures that may be retried at all."""

    def __init__(self, retry: RetryBaseT) -> None:
        self._retry = retry

    def __call__(self, retry_state: RetryCallState) -> bool:
        exc = _failure(retry_state)
        if not isinstance(exc, Exception) or isinstance(exc, BudgetExhausted):
            return False
        return bool(self._retry(retry_state))


class WaitBackoff(wait_base):
    """:meth:`RetryPolicy.backoff` after each failed attempt. ``last_attempt``: the
    attempt after which the policy stops anyway, whose wait draws no jitter (so a seeded
    ``rng`` gives the same waits to the calls after it)."""

    def __init__(
        self, policy: RetryPolicy, rng: random.Random, *, last_attempt: int | None = None
    ) -> None:
        self._policy = policy
        self._rng = rng
        self._last = last_attempt

    def __call__(self, retry_state: RetryCallState) -> float:
        """Seconds to wait before the next attempt."""
        attempt = retry_state.attempt_number
        if self._last is not None and attempt >= self._last:
            return 0.0
        return self._policy.backoff(attempt, self._rng)


class WaitRetryAfter(wait_base):
    """``base``'s wait, or the failure's ``Retry-After`` (capped at ``cap``) when longer."""

    def __init__(self, base: WaitBaseT, classify: Classifier, cap: float) -> None:
        self._base = base
        self._classify = classify
        self._cap = cap

    def __call__(self, retry_state: RetryCallState) -> float:
        """Seconds to wait before the next attempt."""
        delay = float(self._base(retry_state))
        exc = _failure(retry_state)
        if exc is None:
            return delay
        return _longer_retry_after(delay, self._classify(exc).retry_after, self._cap)


class StopBeforeWallBudget(stop_base):
    """Stop when the wall budget left (``wall_left()``; ``None``: no limit) cannot cover
    the next wait: tenacity's ``stop_before_delay``, read from the episode's ledger."""

    def __init__(self, wall_left: WallLeft) -> None:
        self._wall_left = wall_left

    def __call__(self, retry_state: RetryCallState) -> bool:
        """Whether to give up rather than wait ``retry_state.upcoming_sleep``."""
        left = self._wall_left()
        return left is not None and retry_state.upcoming_sleep >= left


def _before_sleep(
    on_retry: OnRetry | None, user: Callable[[RetryCallState], Any] | None
) -> Callable[[RetryCallState], None] | None:
    """``on_retry(attempt, exc, delay)`` (it may raise :class:`BudgetExhausted`), then
    the template's ``before_sleep``."""
    if on_retry is None and user is None:
        return None

    def hook(state: RetryCallState) -> None:
        if on_retry is not None:
            exc = _failure(state)
            assert exc is not None  # only failures are retried
            on_retry(state.attempt_number, exc, state.upcoming_sleep)
        if user is not None:
            user(state)

    return hook


def _strategies(
    policy: RetryPolicy,
    *,
    classifier: Classifier,
    wall_left: WallLeft,
    on_retry: OnRetry | None,
    rng: random.Random | None,
) -> dict[str, Any]:
    """The keyword arguments of the ``Retrying`` that runs one call under ``policy``."""
    template = policy.template
    classify = _Classified(classifier)
    stop, wait, retry = policy.stop, policy.wait, policy.retry
    if template is not None:  # the policy's own fields win over the template's
        stop = template.stop if stop is None else stop
        wait = template.wait if wait is None else wait
        retry = template.retry if retry is None else retry
    if wait is None:
        last = policy.max_attempts if stop is None else None
        wait = WaitBackoff(policy, rng or random.Random(), last_attempt=last)
    if policy.honour_retry_after:
        wait = WaitRetryAfter(wait, classify, policy.max_delay)
    rules: dict[str, Any] = {
        "stop": stop_any(
            # stop_any calls each stop: a plain callable, as StopBaseT allows, is one too
            stop_after_attempt(policy.max_attempts) if stop is None else cast("stop_base", stop),
            StopBeforeWallBudget(wall_left),  # always: the budget wins
        ),
        "wait": wait,
        "retry": RetryIfTransient(classify) if retry is None else _Retriable(retry),
        "before_sleep": _before_sleep(on_retry, template.before_sleep if template else None),
        "reraise": True,
    }
    if template is not None:
        rules.update(before=template.before, after=template.after)
    return rules


class RetryState:
    """The retry decisions of one call, without sleeping, calling or reporting: tenacity's
    own decision step (``Retrying.iter``) over the strategies the drivers use.

    Attributes:
        attempt: attempts made and failed so far.
    """

    __slots__ = ("_retrying", "_state", "attempt")

    def __init__(
        self,
        policy: RetryPolicy,
        *,
        classifier: Classifier = classify_exception,
        wall_left: WallLeft = _no_wall_limit,
        rng: random.Random | None = None,
    ) -> None:
        rules = _strategies(
            policy, classifier=classifier, wall_left=wall_left, on_retry=None, rng=rng
        )
        self._retrying = Retrying(**rules)
        self._retrying.begin()
        self._state = RetryCallState(self._retrying, fn=None, args=(), kwargs={})
        self.attempt = 0

    def after_failure(self, exc: BaseException) -> float | None:
        """The attempt just made failed with ``exc``: seconds to wait before the next one,
        or ``None`` to give up (a permanent error, the last attempt, or a wait that would
        pass the wall budget left)."""
        self.attempt += 1
        self._state.set_exception((type(exc), exc, exc.__traceback__))
        try:
            decision = self._retrying.iter(self._state)
        except BaseException as raised:
            if raised is exc:  # tenacity gives up by raising the failure (reraise)
                return None
            raise
        assert isinstance(decision, DoSleep)  # a failure is retried or raised
        self._state.prepare_for_next_attempt()
        return float(decision)


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
    if first_failure is None:
        try:
            return fn()  # the common case: no retry machinery is built
        except Exception as exc:
            first_failure = exc
    replayed = [first_failure]

    def attempt() -> T:
        if replayed:  # tenacity's attempt 1 is the one already made
            raise replayed.pop()
        return fn()

    rules = _strategies(
        policy, classifier=classifier, wall_left=wall_left, on_retry=on_retry, rng=rng
    )
    return Retrying(sleep=sleep, **rules)(attempt)


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
    """Async twin of :func:`call_with_retry`, on ``tenacity.AsyncRetrying``."""
    if first_failure is None:
        try:
            return await fn()
        except Exception as exc:
            first_failure = exc
    replayed = [first_failure]

    async def attempt() -> T:
        if replayed:
            raise replayed.pop()
        return await fn()

    rules = _strategies(
        policy, classifier=classifier, wall_left=wall_left, on_retry=on_retry, rng=rng
    )
    return cast("T", await AsyncRetrying(sleep=sleep, **rules)(attempt))
