"""Monte Carlo Q-values: replay to a decision point, take the action, then let a policy finish.

For environments without an exact model (or to check one): the estimate of
``Q(point, action)`` is the success rate of episodes that reach the point's
state again (by replaying its earlier actions), take ``action`` and continue
with a ``continuation`` policy. :func:`frozenlake_reseed` makes FrozenLake's
slips independent per sample after the replay.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from budgetmix.environment import Environment, Task, unwrap
from budgetmix.exceptions import ConfigError
from budgetmix.training.diagnostics.episodes import (
    DecisionPoint,
    LiveEpisode,
    Policy,
    QFunction,
    Snapshot,
    default_snapshot,
)

__all__ = ["frozenlake_reseed", "monte_carlo_q"]


def frozenlake_reseed(env: Environment, seed: int) -> None:
    """Reseed the slips of a live FrozenLake episode (for Monte Carlo continuations).

    Relies on ``FrozenLakeEnv`` keeping its gymnasium env in ``_gym``.
    """
    import numpy as np

    unwrap(env)._gym.unwrapped.np_random = np.random.default_rng(seed)  # type: ignore[attr-defined]


def monte_carlo_q(
    tasks: Sequence[Task],
    continuation: Policy,
    *,
    n: int = 32,
    notice_format: str = "v1-compact",
    snapshot: Snapshot = default_snapshot,
    reseed: Callable[[Environment, int], None] | None = None,
    max_attempts: int = 50,
    seed: int = 0,
) -> QFunction:
    """Monte Carlo Q: reach the point's state again, take the action, then run ``continuation``.

    The state is reached by replaying ``point.actions`` in a fresh environment of
    the point's task (looked up in ``tasks`` by ``task_id``). With ``reseed`` the
    environment's randomness is reseeded after the replay, once per sample;
    without it, each sample replays from a different reset seed and only replays
    that end in the same ``snapshot`` count (rejection; a sample is dropped after
    ``max_attempts`` misses). The estimate is the mean success over the kept
    samples (0.0 when none was kept).

    Raises:
        ConfigError: ``n`` < 1, a point of an unknown task, or (with ``reseed``)
            a replay that does not reach the recorded state.
    """
    if n < 1:
        raise ConfigError(f"n: must be >= 1, got {n}")
    registry = {t.task_id: t for t in tasks}

    def q(point: DecisionPoint, action: str) -> float:
        task = registry.get(point.task_id)
        if task is None:
            raise ConfigError(f"monte_carlo_q: unknown task {point.task_id!r}")
        rng = random.Random(f"mc:{seed}:{point.task_id}:{point.seed}:{point.turn}:{action}")
        wins = total = 0
        for i in range(n):
            ep = _replayed(task, point, notice_format, snapshot, reseed, rng, i, max_attempts)
            if ep is None:
                continue
            total += 1
            ep.apply(ep.point(), action, None, 0.0)
            while ep.termination is None:
                nxt = ep.point()
                ep.apply(nxt, continuation([nxt])[0], None, 0.0)
            wins += int(ep.success)
        return wins / total if total else 0.0

    return q


def _replayed(
    task: Task,
    point: DecisionPoint,
    fmt: str,
    snapshot: Snapshot,
    reseed: Callable[[Environment, int], None] | None,
    rng: random.Random,
    sample: int,
    max_attempts: int,
) -> LiveEpisode | None:
    attempts = 1 if reseed is not None else max_attempts
    for _ in range(attempts):
        seed = task.seed if reseed is not None else rng.randrange(2**31)
        replay = Task(task_id=task.task_id, make_env=task.make_env, seed=seed)
        ep = LiveEpisode(replay, point.turns_total, fmt, snapshot)
        for a in point.actions:
            ep.apply(ep.point(), a, None, 0.0)
            if ep.termination is not None:
                break
        if ep.termination is None and snapshot(ep.env) == point.state:
            if reseed is not None:
                reseed(ep.env, rng.randrange(2**31) + sample)
            ep.points.clear()
            return ep
        if reseed is not None:
            raise ConfigError("monte_carlo_q: replaying the actions did not reach the same state")
    return None
