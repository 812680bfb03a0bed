"""Retries of transient provider errors: classification, backoff, wall budget, span events."""

from __future__ import annotations

import random
from typing import Any

import pytest
from _sdk_doubles import FakeClock
from budgetmix import (
    Budget,
    BudgetController,
    ConfigError,
    ProviderError,
    RetryPolicy,
    classify_exception,
)
from budgetmix.provider_errors import TransientInfo
from budgetmix.retry import call_with_retry


class FakeResponse:
    def __init__(self, status: int, headers: dict[str, str] | None = None) -> None:
        self.status_code = status
        self.headers = headers or {}


class HTTPStatusError(Exception):
    """Shaped like httpx / openai / anthropic status errors (``.response``)."""

    def __init__(self, status: int, headers: dict[str, str] | None = None) -> None:
        super().__init__(f"HTTP {status}")
        self.response = FakeResponse(status, headers)


class APIStatusError(Exception):
    """Shaped like SDK errors that carry ``status_code`` directly."""

    def __init__(self, status: int) -> None:
        super().__init__(f"status {status}")
        self.status_code = status


class APIConnectionError(Exception):
    pass


class ReadTimeout(Exception):
    pass


@pytest.mark.parametrize(
    ("exc", "transient", "status"),
    [
        (HTTPStatusError(429), True, 429),
        (HTTPStatusError(500), True, 500),
        (HTTPStatusError(503), True, 503),
        (APIStatusError(502), True, 502),
        (APIStatusError(529), True, 529),
        (HTTPStatusError(408), True, 408),
        (HTTPStatusError(400), False, 400),
        (APIStatusError(401), False, 401),
        (APIStatusError(404), False, 404),
        (TimeoutError(), True, None),
        (ConnectionResetError(), True, None),
        (APIConnectionError(), True, None),
        (ReadTimeout(), True, None),
        (ValueError("bad"), False, None),
    ],
    ids=repr,
)
def test_classification(exc: BaseException, transient: bool, status: int | None) -> None:
    info = classify_exception(exc)
    assert info.transient is transient
    assert info.status_code == status


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "7"}, 7.0),
        ({"Retry-After": "3"}, 3.0),  # a plain dict is not case-insensitive
        ({"retry-after-ms": "1500"}, 1.5),
        ({"retry-after": "soon"}, None),  # malformed: ignored, never a crash
        ({"retry-after": "nan"}, None),
        ({"retry-after": "-4"}, 0.0),
        ({}, None),
    ],
)
def test_retry_after(headers: dict[str, str], expected: float | None) -> None:
    assert classify_exception(HTTPStatusError(429, headers)).retry_after == expected


def test_retry_after_http_date_in_the_past_is_zero() -> None:
    past = {"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}
    info = classify_exception(HTTPStatusError(503, past))
    assert info.retry_after == 0.0


def test_policy_validation() -> None:
    with pytest.raises(ConfigError, match="max_attempts"):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ConfigError, match="jitter"):
        RetryPolicy(jitter=-1)


def test_backoff_grows_with_bounded_jitter() -> None:
    policy = RetryPolicy(initial_delay=1.0, multiplier=2.0, max_delay=8.0, jitter=0.25)
    rng = random.Random(0)
    plain = TransientInfo(True)
    for attempt in range(1, 8):
        base = min(8.0, 2.0 ** (attempt - 1))
        for _ in range(50):
            d = policy.delay(attempt, plain, rng)
            assert base <= d <= base * 1.25
    # Retry-After is honoured when longer, capped at max_delay
    assert policy.delay(1, TransientInfo(True, 429, 5.0), rng) == 5.0
    assert policy.delay(1, TransientInfo(True, 429, 60.0), rng) == 8.0


class Flaky:
    """Fails with the given exceptions, then returns ``"ok"``."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


def test_retry_after_is_honoured_with_injected_sleep() -> None:
    sleeps: list[float] = []
    fn = Flaky(HTTPStatusError(429, {"retry-after": "4"}), HTTPStatusError(500))
    policy = RetryPolicy(initial_delay=0.5, multiplier=2.0, jitter=0.0)
    assert call_with_retry(fn, policy, sleep=sleeps.append) == "ok"
    assert sleeps == [4.0, 1.0]
    assert fn.calls == 3


def test_400_is_not_retried() -> None:
    sleeps: list[float] = []
    fn = Flaky(HTTPStatusError(400))
    with pytest.raises(HTTPStatusError):
        call_with_retry(fn, RetryPolicy(), sleep=sleeps.append)
    assert fn.calls == 1 and sleeps == []


def test_gives_up_after_max_attempts() -> None:
    sleeps: list[float] = []
    fn = Flaky(*[TimeoutError() for _ in range(10)])
    with pytest.raises(TimeoutError):
        call_with_retry(fn, RetryPolicy(max_attempts=3, jitter=0.0), sleep=sleeps.append)
    assert fn.calls == 3 and len(sleeps) == 2


def test_a_first_failure_made_by_the_caller_counts_as_attempt_one() -> None:
    """``Turn.call`` makes attempt 1 itself (no retry machinery on success) and hands a
    failure over: the attempts stay max_attempts in all, and a permanent error is
    raised without calling again."""
    sleeps: list[float] = []
    fn = Flaky(*[TimeoutError() for _ in range(10)])
    with pytest.raises(TimeoutError):
        call_with_retry(
            fn,
            RetryPolicy(max_attempts=3, jitter=0.0),
            sleep=sleeps.append,
            first_failure=TimeoutError(),
        )
    assert fn.calls == 2 and len(sleeps) == 2

    recovering = Flaky(HTTPStatusError(503))
    policy = RetryPolicy(max_attempts=3, jitter=0.0)
    assert call_with_retry(recovering, policy, sleep=sleeps.append, first_failure=ReadTimeout())
    assert recovering.calls == 2

    never = Flaky()
    with pytest.raises(HTTPStatusError):
        call_with_retry(never, RetryPolicy(), first_failure=HTTPStatusError(400))
    assert never.calls == 0


def test_never_sleeps_past_the_wall_budget(fake_clock: FakeClock) -> None:
    policy = RetryPolicy(max_attempts=10, initial_delay=1.0, multiplier=2.0, jitter=0.0)
    c = BudgetController(Budget(turns=3, wall_seconds=10), retry=policy, clock=fake_clock)
    fn = Flaky(*[HTTPStatusError(503) for _ in range(10)])
    with c.episode() as ep:
        turn = ep.begin_turn()
        with pytest.raises(ProviderError) as info:
            turn.call(fn, sleep=fake_clock.sleep)
    # 1 + 2 + 4 = 7 s slept; the next wait (8 s) would pass the 10 s budget: give up
    assert fake_clock.sleeps == [1.0, 2.0, 4.0]
    assert fn.calls == 4
    assert info.value.status_code == 503 and info.value.retryable
    assert ep.result is not None
    assert [m.kind for m in ep.result.mistakes] == ["provider_error"]


def test_retry_after_longer_than_the_wall_left_is_not_waited(fake_clock: FakeClock) -> None:
    c = BudgetController(Budget(turns=3, wall_seconds=30), clock=fake_clock)
    fn = Flaky(HTTPStatusError(429, {"retry-after": "29"}))
    with c.episode() as ep:
        fake_clock.advance(5)
        with pytest.raises(ProviderError):
            ep.begin_turn().call(fn, sleep=fake_clock.sleep)
    assert fake_clock.sleeps == [] and fn.calls == 1


def test_each_retry_is_a_span_event(fake_clock: FakeClock, otel: Any) -> None:
    c = BudgetController(
        Budget(turns=2),
        retry=RetryPolicy(initial_delay=1.0, jitter=0.0),
        tracer_provider=otel.tracer_provider,
        clock=fake_clock,
    )
    fn = Flaky(HTTPStatusError(503), TimeoutError())
    with c.episode() as ep:
        with ep.begin_turn(model="m") as turn:
            assert turn.call(fn, sleep=fake_clock.sleep) == "ok"
        ep.finish(success=True)
    chat = otel.span("chat m")
    retries = [e for e in chat.events if e.name == "budgetmix.retry"]
    assert [dict(e.attributes) for e in retries] == [
        {
            "budgetmix.retry.attempt": 1,
            "budgetmix.retry.delay_s": 1.0,
            "error.type": "HTTPStatusError",
        },
        {
            "budgetmix.retry.attempt": 2,
            "budgetmix.retry.delay_s": 2.0,
            "error.type": "TimeoutError",
        },
    ]
    assert ep.result is not None and ep.result.used["turns"] == 1


def test_a_child_never_sleeps_past_its_parents_wall_budget(fake_clock: FakeClock) -> None:
    policy = RetryPolicy(max_attempts=10, initial_delay=1.0, multiplier=2.0, jitter=0.0)
    c = BudgetController(Budget(turns=5, wall_seconds=5), retry=policy, clock=fake_clock)
    fn = Flaky(*[HTTPStatusError(503) for _ in range(10)])
    with c.episode() as parent:
        child = parent.child(Budget(turns=2, wall_seconds=100))
        with child, pytest.raises(ProviderError):
            child.begin_turn().call(fn, sleep=fake_clock.sleep)
    # 1 + 2 = 3 s; waiting 4 s more would pass the parent's 5 s deadline
    assert fake_clock.sleeps == [1.0, 2.0]


def test_the_decision_core_decides_without_sleeping_or_calling() -> None:
    """RetryState is what both drivers loop over: it answers wait-or-give-up only."""
    from budgetmix.retry import RetryState

    policy = RetryPolicy(max_attempts=3, initial_delay=1.0, multiplier=2.0, jitter=0.0)
    state = RetryState(policy, rng=random.Random(0))
    assert state.after_failure(HTTPStatusError(503)) == 1.0
    assert state.after_failure(TimeoutError()) == 2.0
    assert state.after_failure(TimeoutError()) is None  # the third attempt was the last
    assert state.attempt == 3
    assert RetryState(policy).after_failure(HTTPStatusError(400)) is None  # permanent
    tight = RetryState(policy, wall_left=lambda: 0.5)
    assert tight.after_failure(TimeoutError()) is None  # would wait past the wall budget


async def test_the_async_driver_retries_like_the_sync_one() -> None:
    from budgetmix.retry import acall_with_retry

    sleeps: list[float] = []
    reported: list[tuple[int, str, float]] = []

    async def sleep(delay: float) -> None:
        sleeps.append(delay)

    fn = Flaky(HTTPStatusError(429, {"retry-after": "4"}), HTTPStatusError(500))

    def call() -> Any:  # returns an awaitable without being a coroutine function
        async def once() -> str:
            return fn()

        return once()

    policy = RetryPolicy(initial_delay=0.5, multiplier=2.0, jitter=0.0)
    result = await acall_with_retry(
        call,
        policy,
        sleep=sleep,
        on_retry=lambda n, exc, d: reported.append((n, type(exc).__name__, d)),
    )
    assert result == "ok" and sleeps == [4.0, 1.0] and fn.calls == 3
    assert reported == [(1, "HTTPStatusError", 4.0), (2, "HTTPStatusError", 1.0)]
