"""Retries run on tenacity: a user's tenacity strategies under the budget's stop,
Retry-After, the wall budget cutting a wait short, cancellation, the config form."""

from __future__ import annotations

import ast
import asyncio
import inspect
import random
from typing import Any

import budgetmix.retry as retry_module
import pytest
import tenacity
from _sdk_doubles import FakeClock
from budgetmix import (
    AccountingPolicy,
    Budget,
    BudgetController,
    BudgetExhausted,
    ConfigError,
    ProviderError,
    RetryPolicy,
)
from budgetmix.retry import acall_with_retry, call_with_retry
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_never,
    wait_fixed,
    wait_none,
)


class Status(Exception):
    """An HTTP status error shaped like the SDKs' (``status_code``, ``response.headers``)."""

    def __init__(self, status: int, retry_after: str | None = None) -> None:
        super().__init__(f"HTTP {status}")
        self.status_code = status
        headers = {"retry-after": retry_after} if retry_after is not None else {}
        self.response = type("R", (), {"status_code": status, "headers": headers})()


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


def test_the_module_runs_on_tenacity_with_no_loop_of_its_own() -> None:
    tree = ast.parse(inspect.getsource(retry_module))
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.While)]
    for driver in (call_with_retry, acall_with_retry, retry_module.RetryState):
        body = ast.parse(inspect.getsource(driver))
        assert not [n for n in ast.walk(body) if isinstance(n, ast.For | ast.AsyncFor)]
    assert retry_module.Retrying is tenacity.Retrying
    assert retry_module.AsyncRetrying is tenacity.AsyncRetrying


def test_a_user_stop_and_wait_stay_under_the_wall_budget(fake_clock: FakeClock) -> None:
    """stop_never and a fixed 3 s wait: the budget's stop ends it (10 s wall: 3 + 3 + 3,
    then 1 s left cannot cover the next 3 s)."""
    policy = RetryPolicy(stop=stop_never, wait=wait_fixed(3))
    c = BudgetController(Budget(turns=2, wall_seconds=10), retry=policy, clock=fake_clock)
    fn = Flaky(*[Status(503) for _ in range(50)])
    with c.episode() as ep, pytest.raises(ProviderError) as info:
        ep.begin_turn().call(fn, sleep=fake_clock.sleep)
    assert fake_clock.sleeps == [3.0, 3.0, 3.0] and fn.calls == 4
    assert info.value.status_code == 503


def test_a_user_stop_that_ends_first_wins_over_max_attempts(fake_clock: FakeClock) -> None:
    policy = RetryPolicy(max_attempts=10, stop=stop_after_attempt(2), jitter=0.0)
    c = BudgetController(Budget(turns=2), retry=policy, clock=fake_clock)
    fn = Flaky(*[Status(503) for _ in range(10)])
    with c.episode() as ep, pytest.raises(ProviderError):
        ep.begin_turn().call(fn, sleep=fake_clock.sleep)
    assert fn.calls == 2 and fake_clock.sleeps == [0.5]


def test_counted_retries_end_at_the_turn_budget_whatever_the_user_stop(
    fake_clock: FakeClock,
) -> None:
    c = BudgetController(
        Budget(turns=3),
        retry=RetryPolicy(stop=stop_never, wait=wait_none()),
        accounting=AccountingPolicy(count_retries=True),
        clock=fake_clock,
    )
    fn = Flaky(*[Status(503) for _ in range(50)])
    with c.episode() as ep, pytest.raises(BudgetExhausted):
        ep.begin_turn().call(fn, sleep=fake_clock.sleep)
    assert fn.calls == 3  # the first turn and two counted retries


def test_a_whole_retrying_template(fake_clock: FakeClock) -> None:
    """The template's stop, wait, retry and hooks run; a ValueError (permanent to the
    classifier) is retried because the template's retry says so."""
    seen: list[tuple[str, int]] = []
    template = Retrying(
        stop=stop_after_attempt(3),
        wait=wait_fixed(2),
        retry=retry_if_exception_type(ValueError),
        after=lambda s: seen.append(("after", s.attempt_number)),
        before_sleep=lambda s: seen.append(("before_sleep", s.attempt_number)),
    )
    c = BudgetController(Budget(turns=2), retry=RetryPolicy(template=template), clock=fake_clock)
    fn = Flaky(ValueError("a"), ValueError("b"))
    with c.episode() as ep:
        assert ep.begin_turn().call(fn, sleep=fake_clock.sleep) == "ok"
    assert fake_clock.sleeps == [2.0, 2.0] and fn.calls == 3
    assert seen == [("after", 1), ("before_sleep", 1), ("after", 2), ("before_sleep", 2)]
    # the policy's own field wins over the template's
    fast = RetryPolicy(template=template, wait=wait_fixed(1))
    sleeps: list[float] = []
    call_with_retry(Flaky(ValueError()), fast, sleep=sleeps.append)
    assert sleeps == [1.0]


def test_a_user_retry_never_retries_the_budget_or_a_cancellation() -> None:
    """Raised on attempt 2 (inside tenacity): propagated at once, not retried."""
    everything = RetryPolicy(retry=retry_if_exception_type(BaseException), wait=wait_none())
    exhausted = BudgetExhausted("turns", {"turns": 1}, {"turns": 1})
    for error in (exhausted, KeyboardInterrupt(), asyncio.CancelledError()):
        fn = Flaky(TimeoutError(), error)
        with pytest.raises(type(error)):
            call_with_retry(fn, everything, sleep=lambda _: None)
        assert fn.calls == 2


def test_retry_after_is_honoured_over_a_user_wait_unless_disabled() -> None:
    sleeps: list[float] = []
    fn = Flaky(Status(429, "7"), Status(429, "7"))
    call_with_retry(fn, RetryPolicy(wait=wait_fixed(1)), sleep=sleeps.append)
    assert sleeps == [7.0, 7.0]
    sleeps.clear()
    fn = Flaky(Status(429, "7"), Status(429, "7"))
    policy = RetryPolicy(wait=wait_fixed(1), honour_retry_after=False)
    call_with_retry(fn, policy, sleep=sleeps.append)
    assert sleeps == [1.0, 1.0]
    sleeps.clear()
    capped = RetryPolicy(max_delay=5.0, jitter=0.0)
    call_with_retry(Flaky(Status(503, "60")), capped, sleep=sleeps.append)
    assert sleeps == [5.0]


def test_the_wall_budget_cuts_a_user_wait_short(fake_clock: FakeClock) -> None:
    """A 20 s wait with 15 s of the wall budget left is not started: nothing slept."""
    policy = RetryPolicy(wait=wait_fixed(20))
    c = BudgetController(Budget(turns=2, wall_seconds=20), retry=policy, clock=fake_clock)
    fn = Flaky(Status(503))
    with c.episode() as ep:
        fake_clock.advance(5)
        with pytest.raises(ProviderError):
            ep.begin_turn().call(fn, sleep=fake_clock.sleep)
    assert fake_clock.sleeps == [] and fn.calls == 1


def test_a_seeded_rng_draws_no_jitter_for_a_wait_that_never_comes() -> None:
    """A call that gives up after 4 attempts draws 3 jitters, as before tenacity, so the
    next call of an agent with a seeded rng waits as it did."""
    rng = random.Random(7)
    with pytest.raises(TimeoutError):
        call_with_retry(
            Flaky(*[TimeoutError() for _ in range(4)]),
            RetryPolicy(max_attempts=4),
            sleep=lambda _: None,
            rng=rng,
        )
    expected = random.Random(7)
    for _ in range(3):
        expected.random()
    assert rng.random() == expected.random()


async def test_cancelling_the_turn_mid_wait_ends_it(fake_clock: FakeClock, otel: Any) -> None:
    waiting = asyncio.Event()

    async def sleep(delay: float) -> None:
        waiting.set()
        await asyncio.Event().wait()  # a wait that only a cancellation ends

    fn = Flaky(Status(503))

    async def call() -> str:
        return fn()

    c = BudgetController(
        Budget(turns=2), tracer_provider=otel.tracer_provider, clock=fake_clock
    )
    async with c.episode() as ep:
        turn = ep.begin_turn(model="m")
        task = asyncio.create_task(turn.acall(call, sleep=sleep))
        await waiting.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        turn.end()
    assert fn.calls == 1  # never called again
    events = [e.name for e in otel.span("chat m").events]
    assert events.count("budgetmix.retry") == 1
    assert ep.result is not None and not ep.result.mistakes  # not a provider error


def test_an_interrupt_mid_wait_ends_a_sync_call() -> None:
    def sleep(delay: float) -> None:
        raise KeyboardInterrupt

    fn = Flaky(Status(503))
    with pytest.raises(KeyboardInterrupt):
        call_with_retry(fn, RetryPolicy(), sleep=sleep)
    assert fn.calls == 1


async def test_the_async_driver_runs_user_strategies_under_the_wall_budget() -> None:
    sleeps: list[float] = []
    left = [10.0]

    async def sleep(delay: float) -> None:
        sleeps.append(delay)
        left[0] -= delay

    fn = Flaky(*[Status(502) for _ in range(50)])

    async def call() -> str:
        return fn()

    with pytest.raises(Status):
        await acall_with_retry(
            call,
            RetryPolicy(stop=stop_never, wait=wait_fixed(4)),
            sleep=sleep,
            wall_left=lambda: left[0],
        )
    assert sleeps == [4.0, 4.0] and fn.calls == 3


def test_to_config_round_trips() -> None:
    policy = RetryPolicy(
        max_attempts=6,
        initial_delay=0.25,
        max_delay=12,
        multiplier=3,
        jitter=0.1,
        honour_retry_after=False,
    )
    config = policy.to_config()
    assert config == {
        "max_attempts": 6,
        "initial_delay": 0.25,
        "max_delay": 12.0,
        "multiplier": 3.0,
        "jitter": 0.1,
        "honour_retry_after": False,
    }
    assert RetryPolicy.from_config(config) == policy
    assert RetryPolicy.from_config({}) == RetryPolicy()
    with pytest.raises(ConfigError, match="unknown RetryPolicy field"):
        RetryPolicy.from_config({"max_attempt": 3})
    with pytest.raises(ConfigError, match=r"RetryPolicy\.jitter"):
        RetryPolicy.from_config({"jitter": 2})
    with pytest.raises(ConfigError, match=r"RetryPolicy\.wait is a tenacity object"):
        RetryPolicy(wait=wait_fixed(1)).to_config()


def test_strategies_are_validated() -> None:
    with pytest.raises(ConfigError, match=r"RetryPolicy\.stop must be a tenacity stop"):
        RetryPolicy(stop=3)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"RetryPolicy\.template must be a tenacity"):
        RetryPolicy(template=stop_never)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="retry_error_callback"):
        RetryPolicy(template=Retrying(retry_error_callback=lambda s: None))


def test_a_plain_callable_works_as_a_strategy() -> None:
    def stop_on_second(state: RetryCallState) -> bool:
        return state.attempt_number >= 2

    sleeps: list[float] = []
    fn = Flaky(*[TimeoutError() for _ in range(5)])
    with pytest.raises(TimeoutError):
        call_with_retry(fn, RetryPolicy(stop=stop_on_second, jitter=0.0), sleep=sleeps.append)
    assert fn.calls == 2 and sleeps == [0.5]


def test_the_retries_section_of_docs_policies_runs() -> None:
    import json
    from pathlib import Path

    text = (Path(__file__).parents[2] / "docs" / "policies.md").read_text()
    section = text.split("## Retries", 1)[1].split("\n## ", 1)[0]
    exec(section.split("```python", 1)[1].split("```", 1)[0], {})
    shown = section.split("`to_config()` writes", 1)[1].split("`{", 1)[1].split("}`", 1)[0]
    assert json.loads("{" + " ".join(shown.split()) + "}") == RetryPolicy().to_config()
