"""The environment registry: every name a config, a command or a test can build an environment by.

One read-only table, :data:`ENVIRONMENTS`, for training and evaluation alike.
Each :class:`EnvSpec` holds the environment's constructor and, where one
exists, the scripted demonstrator that SFT imitates. Nothing adds to the
table at run time: a new environment is a new row here.

* ``echo`` -- :class:`~budgetmix.training.toy.EchoEnv` (torch-only CPU demo);
* ``faulty_tools`` -- :class:`~budgetmix.training.envs.faulty_tools.FaultyToolsEnv`
  (a tool environment: ``lookup``, ``list_keys``, ``answer``);
* ``fault-chain-compact`` -- issue 29's design,
  :class:`~budgetmix.training.envs.fault_chain_compact.CompactFaultChain` (a flaky
  chain where a mistake needs a repair), with the optimum-for-its-error-rate
  demonstrator (budget-blind unless ``demo_budget_aware``);
* ``faulty-tools-compact`` -- the experiment's second environment,
  :class:`~budgetmix.training.envs.faulty_tools_compact.CompactFaultyTools` (a chain
  of flaky lookups in one-letter moves), with the exact-optimum demonstrator
  (budget-blind unless ``demo_budget_aware``; discount ``demo_gamma``);
* ``frozenlake`` -- :class:`~budgetmix.training.envs.frozenlake.FrozenLakeEnv`, with a
  budget-aware oracle demonstrator (:class:`FrozenLakeDemonstrator`);
* ``frozenlake-tools`` -- :class:`~budgetmix.training.envs.frozenlake.FrozenLakeTools`,
  the same game through a ``move(direction)`` tool, with the oracle demonstrator
  writing ``move`` calls;
* ``frozenlake-compact`` -- the experiment's
  :class:`~budgetmix.training.envs.frozenlake_compact.CompactFrozenLake`, with a
  budget-blind demonstrator whose discount is the ``demo_gamma`` keyword;
* ``humaneval`` -- :class:`~budgetmix.training.envs.humaneval.HumanEvalEnv`.

A user's environment needs no row: :func:`resolve_env` (what ``TrainConfig.env``,
``budgetmix train`` and ``budgetmix eval --env`` read) takes a registered name,
the name of an entry point in the group ``budgetmix.environments`` (a package
declares ``[project.entry-points."budgetmix.environments"] myenv = "mypkg.envs:MyEnv"``),
or ``module:attribute`` naming an environment class or a factory that returns one
(``mypkg.envs:MyEnv``; the module is imported as ``import`` would, and a module
found nowhere on ``sys.path`` is looked for in the current directory, which then goes
first on ``sys.path`` as ``python -m`` puts it there: ``budgetmix train --env
user_env:Counter`` finds ``./user_env.py``). The class (or
factory) may carry a ``demonstrator`` attribute, ``(env_kwargs, error_rate, seed) ->
DemoAgent``, for SFT from a scripted demonstrator.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import inspect
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from budgetmix.environment import Environment, Task
from budgetmix.exceptions import ConfigError
from budgetmix.training.envs.agents import FrozenLakeDemonstrator
from budgetmix.training.envs.fault_chain_compact import CHAIN_ENV_NAME, CompactFaultChain
from budgetmix.training.envs.fault_chain_oracle import CHAIN_DEMO_OPTIONS, chain_demo
from budgetmix.training.envs.faulty_tools import FaultyToolsEnv
from budgetmix.training.envs.faulty_tools_compact import (
    TOOLS_COMPACT_ENV_NAME,
    CompactFaultyTools,
)
from budgetmix.training.envs.faulty_tools_oracle import ToolsDemonstrator
from budgetmix.training.envs.frozenlake import TOOLS_ENV_NAME, FrozenLakeEnv, FrozenLakeTools
from budgetmix.training.envs.frozenlake_compact import (
    COMPACT_ENV_NAME,
    MOVE_LETTERS,
    CompactFrozenLake,
)
from budgetmix.training.envs.humaneval import HumanEvalEnv
from budgetmix.training.toy import EchoEnv, echo_agent

if TYPE_CHECKING:
    from budgetmix.training.rollouts.generation import DemoAgent

__all__ = [
    "ENTRY_POINT_GROUP",
    "ENVIRONMENTS",
    "EnvSpec",
    "env_spec",
    "env_tasks",
    "make_env",
    "resolve_env",
]

#: The entry-point group a package lists its environments in.
ENTRY_POINT_GROUP = "budgetmix.environments"

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
            env = self.factory(**options)
        except TypeError as exc:
            raise ConfigError(f"{self.name}: {exc}") from exc
        if not _is_environment(env):
            raise ConfigError(
                f"env: {self.name!r} built a {type(env).__name__}, which is not an environment "
                "(it needs instructions() and reset(seed), and step(action) or the "
                "tool-calling methods tool_specs/call_tool/respond)"
            )
        return env

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


def _frozenlake_tools_demo(kwargs: Mapping[str, Any], error_rate: float, seed: int) -> DemoAgent:
    return FrozenLakeDemonstrator(error_rate, seed, tool_call=True)


def _compact_demo(kwargs: Mapping[str, Any], error_rate: float, seed: int) -> DemoAgent:
    gamma = float(kwargs.get("demo_gamma", 0.99))
    blind = not kwargs.get("demo_budget_aware", False)  # the experiment's aware base opts in
    return FrozenLakeDemonstrator(
        error_rate, f"blind-demo:{seed}", budget_blind=blind, gamma=gamma, moves=MOVE_LETTERS
    )


def _tools_compact_demo(kwargs: Mapping[str, Any], error_rate: float, seed: int) -> DemoAgent:
    gamma = float(kwargs.get("demo_gamma", 0.99))
    blind = not kwargs.get("demo_budget_aware", False)
    return ToolsDemonstrator(error_rate, f"tools-demo:{seed}", budget_blind=blind, gamma=gamma)


#: Registered environments by name (read-only).
ENVIRONMENTS: Mapping[str, EnvSpec] = MappingProxyType(
    {
        "echo": EnvSpec("echo", EchoEnv, _echo_demo),
        "faulty_tools": EnvSpec("faulty_tools", FaultyToolsEnv),
        CHAIN_ENV_NAME: EnvSpec(CHAIN_ENV_NAME, CompactFaultChain, chain_demo, CHAIN_DEMO_OPTIONS),
        TOOLS_COMPACT_ENV_NAME: EnvSpec(
            TOOLS_COMPACT_ENV_NAME,
            CompactFaultyTools,
            _tools_compact_demo,
            frozenset({"demo_gamma", "demo_budget_aware"}),
        ),
        "frozenlake": EnvSpec("frozenlake", FrozenLakeEnv, _frozenlake_demo),
        TOOLS_ENV_NAME: EnvSpec(TOOLS_ENV_NAME, FrozenLakeTools, _frozenlake_tools_demo),
        COMPACT_ENV_NAME: EnvSpec(
            COMPACT_ENV_NAME,
            CompactFrozenLake,
            _compact_demo,
            frozenset({"demo_gamma", "demo_budget_aware"}),
        ),
        "humaneval": EnvSpec("humaneval", HumanEvalEnv),
    }
)


def _is_environment(env: object) -> bool:
    from budgetmix.training.envs.tool_env import ToolCallEnvironment

    return isinstance(env, (Environment, ToolCallEnvironment))


_ENV_METHODS = ("instructions", "reset")


def _spec_of(ref: str, target: object) -> EnvSpec:
    """The spec of a user's class or factory ``target`` named by ``ref``."""
    if not callable(target):
        raise ConfigError(
            f"env: {ref!r} is a {type(target).__name__}, not an environment class or factory"
        )
    if inspect.isclass(target):
        missing = [m for m in _ENV_METHODS if not callable(getattr(target, m, None))]
        has_step = callable(getattr(target, "step", None)) or callable(
            getattr(target, "call_tool", None)
        )
        if missing or not has_step:
            needs = ", ".join([*missing, *([] if has_step else ["step or call_tool"])])
            raise ConfigError(f"env: {ref!r} is not an environment: it has no {needs}")
    demo = getattr(target, "demonstrator", None)
    return EnvSpec(ref, target, demo if callable(demo) else None)


def _entry_point(name: str) -> importlib.metadata.EntryPoint | None:
    found = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP, name=name)
    return next(iter(found), None)


def _import_user_module(module_name: str) -> Any:
    """Import ``module_name``; when its top-level package is found nowhere on
    ``sys.path``, put the current directory first on it (as ``python -m`` does) and try
    again. A console script such as ``budgetmix`` does not have it there."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        here = os.getcwd()
        top = module_name.split(".", 1)[0]
        if exc.name != top or here in sys.path or "" in sys.path:
            raise
        sys.path.insert(0, here)
        importlib.invalidate_caches()
        try:
            return importlib.import_module(module_name)
        except ModuleNotFoundError:
            sys.path.remove(here)  # not here either: leave the path as it was
            raise


def _import_target(ref: str) -> object:
    module_name, _, attr = ref.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"env: expected module:attribute, got {ref!r}")
    try:
        module = _import_user_module(module_name)
    except ModuleNotFoundError as exc:
        raise ConfigError(f"env: {ref!r}: module {exc.name or module_name!r} not found") from exc
    except Exception as exc:  # a user's module may fail in any way while importing
        raise ConfigError(f"env: {ref!r}: importing {module_name!r} failed: {exc!r}") from exc
    target: object = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ConfigError(f"env: {ref!r}: module {module_name!r} has no attribute {attr!r}")
        target = getattr(target, part)
    return target


def resolve_env(ref: str) -> EnvSpec:
    """The environment ``ref`` names: a registered name, an entry point of
    :data:`ENTRY_POINT_GROUP`, or ``module:attribute`` (a class or a factory).

    Raises:
        ConfigError: unknown name (the message lists the registered ones), a module
            that is not found or fails to import, a missing attribute, or an object
            that is not an environment class or factory.
    """
    if not isinstance(ref, str) or not ref:
        raise ConfigError(f"env: expected an environment name or module:attribute, got {ref!r}")
    if ref in ENVIRONMENTS:
        return ENVIRONMENTS[ref]
    entry = _entry_point(ref)
    if entry is not None:
        try:
            target = entry.load()
        except Exception as exc:
            raise ConfigError(
                f"env: entry point {ref!r} ({entry.value}) failed to load: {exc!r}"
            ) from exc
        return _spec_of(ref, target)
    if ":" in ref:
        return _spec_of(ref, _import_target(ref))
    raise ConfigError(
        f"env: unknown environment {ref!r}; known: {', '.join(sorted(ENVIRONMENTS))}, an entry "
        f"point of {ENTRY_POINT_GROUP!r}, or module:Class"
    )


def env_spec(name: str) -> EnvSpec:
    """The environment ``name`` (see :func:`resolve_env`, which this is).

    Raises:
        ConfigError: as :func:`resolve_env`.
    """
    return resolve_env(name)


def make_env(name: str, **kwargs: Any) -> Environment:
    """Build the environment ``name`` names (:func:`resolve_env`) with ``kwargs``.

    Raises:
        ConfigError: as :func:`resolve_env`, or a bad keyword for that environment.
        MissingExtraError: the environment's optional dependency is missing.
    """
    return env_spec(name).make_env(kwargs)


def env_tasks(name: str, seeds: Iterable[int], kwargs: Mapping[str, Any]) -> list[Task]:
    """One task per seed of the environment ``name`` built with ``kwargs``.

    Raises:
        ConfigError: unknown ``name`` or a bad keyword.
    """
    return env_spec(name).make_tasks(seeds, kwargs)
