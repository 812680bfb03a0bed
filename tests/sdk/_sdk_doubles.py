"""Test doubles shared by the core SDK tests (imported by name; tests/sdk is on sys.path)."""

from __future__ import annotations


class FakeClock:
    """A monotonic clock that only moves when told to (``sleep`` advances it)."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    async def asleep(self, seconds: float) -> None:
        self.sleep(seconds)
