"""Doubles for the evaluation tests: a tiny line-walking env and scripted agents."""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Sequence

from budgetmix.environment import StepLabel, StepResult, Task
from budgetmix.exceptions import ProviderError


class LineEnv:
    """Walk from 0 to ``goal``.

    Actions: ``+`` (progress; success at the goal), ``-`` (back), ``x`` (a tool
    error), ``bad-args`` (invalid tool arguments), ``stop`` (ends without success),
    anything else is a format error. Actions in ``ends_on`` also end the episode.
    """

    name = "line"

    def __init__(self, goal: int = 4, ends_on: Sequence[str] = ()) -> None:
        self.goal = goal
        self.ends_on = frozenset(ends_on)
        self.pos = 0
        self.steps = 0

    def instructions(self) -> str:
        return f"Reach {self.goal} with '+'."

    def reset(self, seed: int) -> str:
        self.pos = 0
        self.steps = 0
        return "pos 0"

    def step(self, action: str) -> StepResult:
        self.steps += 1
        a = action.strip()
        done = a in self.ends_on or a == "stop"
        if a == "+":
            self.pos += 1
            label = StepLabel(progress=True)
        elif a == "-":
            self.pos = max(0, self.pos - 1)
            label = StepLabel()
        elif a == "x":
            label = StepLabel(mistake="tool_error")
        elif a == "bad-args":
            label = StepLabel(valid=False, mistake="invalid_tool_arguments")
        elif a == "stop":
            label = StepLabel(detail="wrong answer")
        else:
            label = StepLabel(valid=False, mistake="model_format_error")
        success = self.pos >= self.goal
        return StepResult(
            observation=f"pos {self.pos}",
            reward=float(success),
            done=done or success,
            success=success,
            label=label,
        )


def line_tasks(n: int = 3, goal: int = 4, ends_on: Sequence[str] = ()) -> list[Task]:
    return [
        Task(task_id=f"line-{i}", make_env=lambda i=i: LineEnv(goal + i % 2, ends_on), seed=i)
        for i in range(n)
    ]


class RandomWalker:
    """A seeded budget-blind (or not) agent: mostly '+', sometimes '-', '?' or 'x'."""

    def __init__(self, *, sees_budget: bool = False) -> None:
        self.sees_budget = sees_budget
        self.rng = random.Random(0)
        self.seen: list[tuple[str | None, int | None]] = []

    def start(self, env: object, seed: int) -> None:
        self.rng = random.Random(seed)

    def act(self, observation: str, notice: str | None, turns_remaining: int | None) -> str:
        self.seen.append((notice, turns_remaining))
        return self.rng.choices(["+", "-", "?", "x"], weights=[5, 2, 1, 1])[0]


class AsyncWalker(RandomWalker):
    """The async twin with a simulated latency."""

    def __init__(self, *, sees_budget: bool = False, latency: float = 0.0) -> None:
        super().__init__(sees_budget=sees_budget)
        self.latency = latency

    async def act(  # type: ignore[override]
        self, observation: str, notice: str | None, turns_remaining: int | None
    ) -> str:
        await asyncio.sleep(self.latency)
        return super().act(observation, notice, turns_remaining)


class Script:
    """Plays a fixed list of actions (the last one repeats); may raise instead."""

    sees_budget = True

    def __init__(self, actions: Sequence[str], raise_exc: BaseException | None = None) -> None:
        self.actions = list(actions)
        self.raise_exc = raise_exc
        self.i = 0

    def start(self, env: object, seed: int) -> None:
        self.i = 0

    def act(self, observation: str, notice: str | None, turns_remaining: int | None) -> str:
        if self.raise_exc is not None:
            raise self.raise_exc
        a = self.actions[min(self.i, len(self.actions) - 1)]
        self.i += 1
        return a


class Crasher(RandomWalker):
    """A RandomWalker that raises once ``budget`` episodes have started (shared count)."""

    def __init__(self, counter: list[int], budget: int, lock: threading.Lock) -> None:
        super().__init__(sees_budget=True)
        self.counter, self.budget, self.lock = counter, budget, lock
        self.doomed = False

    def start(self, env: object, seed: int) -> None:
        super().start(env, seed)
        with self.lock:
            self.counter[0] += 1
            self.doomed = self.counter[0] > self.budget

    def act(self, observation: str, notice: str | None, turns_remaining: int | None) -> str:
        if self.doomed:
            raise RuntimeError("agent crashed")
        return super().act(observation, notice, turns_remaining)


PROVIDER_DOWN = ProviderError("503 from provider", status_code=503, retryable=True)
