"""The environment registry: every name a config, a command or a test can build an environment by.

One read-only table, :data:`ENVIRONMENTS`, for training and evaluation alike.
Each :class:`EnvSpec` holds the environment's constructor and, where one
exists, the scripted demonstrator that SFT imitates. Nothing adds to the
table at run time: a new environment is a new row here.

* ``echo`` -- :class:`~budgetmix.training.toy.EchoEnv` (torch-only CPU demo);
* ``faulty_tools`` -- :class:`~budgetmix.training.envs.faulty_tools.FaultyToolsEnv`;
* ``frozenlake`` -- :class:`~budgetmix.training.envs.frozenlake.FrozenLakeEnv`, with a
  budget-aware oracle demonstrator (:class:`FrozenLakeDemonstrator`);
* ``frozenlake-compact`` -- the experiment's
  :class:`~budgetmix.training.envs.frozenlake_compact.CompactFrozenLake`, with a
  budget-blind demonstrator whose discount is the ``demo_gamma`` keyword;
* ``humaneval`` -- :class:`~budgetmix.training.envs.humaneval.HumanEvalEnv`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from budgetmix.environment import Environment, Task
from budgetmix.exceptions import ConfigError
from budgetmix.training.envs.agents import FrozenLakeDemonstrator
from budgetmix.training.envs.faulty_tools import FaultyToolsEnv
from budgetmix.training.envs.frozenlake import FrozenLakeEnv
from budgetmix.training.envs.frozenlake_compact import (
    COMPACT_ENV_NAME,
    MOVE_LETTERS,
    CompactFrozenLake,
)
from budgetmix.training.envs.humaneval import HumanEvalEnv
from budgetmix.training.toy import EchoEnv, echo_agent

if TYPE_CHECKING:
    from budgetmix.training.generation import DemoAgent

__all__ = ["ENVIRONMENTS", "EnvSpec", "env_spec", "env_tasks", "make_env"]

#: ``(env_kwargs, error_rate, seed) -> demonstrator`` of one environment.
DemoFactory = Callable[[Mapping[str, Any], float, int], "DemoAgent"]


@dataclass(frozen=True, slots=True)
class EnvSpec:
    """One registered environment: its constructor and its SFT demonstrator (if any).

    ``demo_options`` name the keyword arguments only the demonstrator reads; they
    are dropped before the constructor is called.
    """

    name: str
    factory: Callable[..., Environment]
    demonstrator: DemoFactory | None = None
    demo_options: frozenset[str] = field(default_factory=frozenset)

    def make_env(self, kwargs: Mapping[str, Any]) -> Environment:
        """Build the environment with ``kwargs``.

        Raises:
            ConfigError: a bad keyword (the message names the environment).
            MissingExtraError: the environment's optional dependency is missing.
        """
        options = {k: v for k, v in kwargs.items() if k not in self.demo_options}
        try:
            return self.factory(**options)
        except TypeError as exc:
            raise ConfigError(f"{self.name}: {exc}") from exc

    def make_tasks(self, seeds: Iterable[int], kwargs: Mapping[str, Any]) -> list[Task]:
        """One :class:`Task` per seed, ``<name>-<seed>``; ``kwargs`` are checked once, up front.

        Raises:
            ConfigError: as :meth:`make_env`.
        """
        self.make_env(kwargs)
        build = functools.partial(self.make_env, dict(kwargs))
        return [Task(task_id=f"{self.name}-{s}", make_env=build, seed=s) for s in seeds]

    def make_demo_agent(self, kwargs: Mapping[str, Any], error_rate: float, seed: int) -> DemoAgent:
        """The scripted demonstrator, erring at ``error_rate``, seeded by ``seed``.

        Raises:
            ConfigError: the environment has none.
        """
        if self.demonstrator is None:
            raise ConfigError(f"env: {self.name!r} has no scripted demonstrator for SFT")
        return self.demonstrator(kwargs, error_rate, seed)


def _echo_demo(kwargs: Mapping[str, Any], error_rate: float, seed: int) -> DemoAgent:
    return echo_agent(error_rate, seed)


def _frozenlake_demo(kwargs: Mapping[str, Any], error_rate: float, seed: int) -> DemoAgent:
    return FrozenLakeDemonstrator(error_rate, seed)


def _compact_demo(kwargs: Mapping[str, Any], error_rate: float, seed: int) -> DemoAgent:
    gamma = float(kwargs.get("demo_gamma", 0.99))
    return FrozenLakeDemonstrator(
        error_rate, f"blind-demo:{seed}", budget_blind=True, gamma=gamma, moves=MOVE_LETTERS
    )


#: Registered environments by name (read-only).
ENVIRONMENTS: Mapping[str, EnvSpec] = MappingProxyType(
    {
        "echo": EnvSpec("echo", EchoEnv, _echo_demo),
        "faulty_tools": EnvSpec("faulty_tools", FaultyToolsEnv),
        "frozenlake": EnvSpec("frozenlake", FrozenLakeEnv, _frozenlake_demo),
        COMPACT_ENV_NAME: EnvSpec(
            COMPACT_ENV_NAME, CompactFrozenLake, _compact_demo, frozenset({"demo_gamma"})
        ),
        "humaneval": EnvSpec("humaneval", HumanEvalEnv),
    }
)


def env_spec(name: str) -> EnvSpec:
    """The registered environment ``name``.

    Raises:
        ConfigError: unknown name (the message lists the known ones).
    """
    try:
        return ENVIRONMENTS[name]
    except KeyError:
        raise ConfigError(
            f"env: unknown environment {name!r}; known: {', '.join(sorted(ENVIRONMENTS))}"
        ) from None


def make_env(name: str, **kwargs: Any) -> Environment:
    """Build the environment registered as ``name`` with ``kwargs``.

    Raises:
        ConfigError: unknown ``name`` (the message lists the known ones), or a
            bad keyword for that environment.
        MissingExtraError: the environment's optional dependency is missing.
    """
    return env_spec(name).make_env(kwargs)


def env_tasks(name: str, seeds: Iterable[int], kwargs: Mapping[str, Any]) -> list[Task]:
    """One task per seed of the environment ``name`` built with ``kwargs``.

    Raises:
        ConfigError: unknown ``name`` or a bad keyword.
    """
    return env_spec(name).make_tasks(seeds, kwargs)
