"""Named training environments: how a config's ``env`` becomes tasks and a scripted demonstrator.

``echo`` (:mod:`budgetmix.training.toy`) needs nothing beyond torch;
``frozenlake`` uses :class:`budgetmix.training.envs.frozenlake.FrozenLakeEnv`
(gymnasium, numpy) with a budget-aware oracle demonstrator: the action that
maximises the exact finite-horizon success probability for the turns the
ledger says remain.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from budgetmix.environment import Task
from budgetmix.exceptions import ConfigError

if TYPE_CHECKING:
    from budgetmix.training.generation import DemoAgent, GenerationRequest

__all__ = ["ENVIRONMENTS", "EnvSpec", "env_spec"]


@dataclass(frozen=True, slots=True)
class EnvSpec:
    """Builds tasks for seeds and a scripted demonstrator for one environment name."""

    name: str
    make_tasks: Callable[[list[int], Mapping[str, Any]], list[Task]]
    make_demo_agent: Callable[[Mapping[str, Any], float, int], DemoAgent]


def _echo_tasks(seeds: list[int], kwargs: Mapping[str, Any]) -> list[Task]:
    from budgetmix.training.toy import echo_tasks

    return echo_tasks(seeds, **kwargs)


def _echo_agent(kwargs: Mapping[str, Any], error_rate: float, seed: int) -> DemoAgent:
    from budgetmix.training.toy import echo_agent

    return echo_agent(error_rate, seed)


def _frozenlake_tasks(seeds: list[int], kwargs: Mapping[str, Any]) -> list[Task]:
    from budgetmix.training.envs.frozenlake import FrozenLakeEnv

    FrozenLakeEnv(**kwargs)  # validate the arguments once, before any rollout
    return [
        Task(task_id=f"frozenlake-{s}", make_env=lambda: FrozenLakeEnv(**kwargs), seed=s)
        for s in seeds
    ]


class _FrozenLakeOracle:
    """Budget-aware optimal moves, with a random wrong move at ``error_rate``."""

    def __init__(self, error_rate: float, seed: int) -> None:
        self.error_rate = error_rate
        self.rng = random.Random(seed)
        self._cache: dict[tuple[str, ...], Any] = {}

    def __call__(self, request: GenerationRequest) -> str:
        from budgetmix.training.envs.frozenlake import FrozenLakeEnv
        from budgetmix.training.envs.frozenlake_oracle import ACTIONS, finite_horizon_values

        env = request.env
        assert isinstance(env, FrozenLakeEnv)
        horizon = request.state.turns_total
        key = (*env.desc, str(horizon))
        if key not in self._cache:
            self._cache[key] = finite_horizon_values(env.model, horizon)[1]
        q = self._cache[key]
        left = min(request.state.turns_remaining, horizon)
        best = int(q[left][env.state].argmax())
        if self.rng.random() < self.error_rate:
            best = self.rng.choice([a for a in range(4) if a != best])
        return str(ACTIONS[best])


def _frozenlake_agent(kwargs: Mapping[str, Any], error_rate: float, seed: int) -> DemoAgent:
    return _FrozenLakeOracle(error_rate, seed)


ENVIRONMENTS: dict[str, EnvSpec] = {
    "echo": EnvSpec("echo", _echo_tasks, _echo_agent),
    "frozenlake": EnvSpec("frozenlake", _frozenlake_tasks, _frozenlake_agent),
}


def env_spec(name: str) -> EnvSpec:
    """The registered environment ``name``.

    Raises:
        ConfigError: unknown name (the message lists the known ones).
    """
    try:
        return ENVIRONMENTS[name]
    except KeyError:
        raise ConfigError(
            f"env: unknown environment {name!r}; known: {', '.join(ENVIRONMENTS)}"
        ) from None
