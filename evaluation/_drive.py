"""Drivers of one episode's core (``Evaluator._episode``).

The core is a generator: it yields each call it needs (:class:`Call`: the agent's
``act``, the environment's ``reset`` and ``step``, the agent's ``start``) and is sent
each result back, or thrown the call's exception, so one body holds the episode's logic
for every kind of agent. Two thin drivers make the calls:

* :func:`drive_sync` in the thread it runs in. A sync agent's whole episode is driven in
  one pool thread, so it costs one hop to the pool instead of one per call (each hop is
  a thread wake-up either way: about 0.1 ms of CPU).
* :func:`drive_async` on the event loop: an async agent's ``act`` is awaited, and the
  calls the evaluator offloads go to its pool.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["Call", "Core", "drive_async", "drive_sync"]

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Call:
    """One call the core needs: ``fn(*args)``; ``env`` for the environment's calls (and
    the agent's ``start``), else the agent's ``act``."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    env: bool


#: An episode's core: yields calls, is sent their results, returns the episode's outcome.
Core = Generator[Call, Any, R]


def drive_sync(core: Core[R]) -> R:
    """Run ``core``, making every call here (in this thread)."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            call = _step(core, value, error)
        except StopIteration as stop:
            result: R = stop.value
            return result
        finally:
            value = error = None  # consumed: a kept exception would keep the core's frame
        try:
            value = call.fn(*call.args)
        except BaseException as exc:  # the core decides; what it does not handle comes back
            error = exc


async def drive_async(
    core: Core[R],
    offload: Callable[..., Awaitable[Any]],
    *,
    agent_awaits: bool,
    env_offloaded: bool,
) -> R:
    """Run ``core`` on the event loop: ``act`` awaited when ``agent_awaits`` (an async
    agent), else sent to ``offload(fn, *args)``; environment calls sent to ``offload``
    when ``env_offloaded``, else made here."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            call = _step(core, value, error)
        except StopIteration as stop:
            result: R = stop.value
            return result
        finally:
            value = error = None  # consumed: a kept exception would keep the core's frame
        try:
            if not call.env and agent_awaits:
                value = await call.fn(*call.args)
            elif call.env and not env_offloaded:
                value = call.fn(*call.args)
            else:
                value = await offload(call.fn, *call.args)
        except BaseException as exc:  # cancellation too: the core closes its episode
            error = exc


def _step(core: Core[Any], value: Any, error: BaseException | None) -> Call:
    """The core's next call, sent ``value`` or thrown ``error``. The drivers drop both at
    once: a kept exception's traceback would hold the core's finished frame, and so its
    agent, which a batching server counts as in flight, until the garbage collector ran."""
    return core.send(value) if error is None else core.throw(error)
