"""What an environment is and who plays it: the protocols evaluation and training share.

An environment is a text game: ``reset(seed)`` returns the first observation,
``step(action_text)`` returns a :class:`StepResult`. Every step carries a
:class:`StepLabel` (was the action valid, did it make progress, which mistake
kind if any) so mistakes and recoveries are measurable without a model in the
loop. Environments own their reward: 1.0 on success, 0.0 otherwise, unless a
subclass documents more. :class:`FaultInjection` wraps any environment and
rejects chosen steps; :func:`unwrap` finds the environment below such wrappers.

Two kinds of player:

* an :class:`EnvAgent` (or :class:`AsyncEnvAgent`), what the evaluator plays
  with: started once per episode (``start(env, seed)``), then asked for one
  action per turn, ``act(observation, notice, turns_remaining)``. It returns the
  action text, or an :class:`AgentReply` when it also knows what the call cost
  (tokens, USD). ``sees_budget`` declares whether the agent reads ``notice`` /
  ``turns_remaining``: a budget-blind agent (``sees_budget=False``) is given
  neither, which lets the evaluator run it once at the largest budget and derive
  every smaller one by truncation (prefix sharing). Whether an agent ignores its
  budget cannot be detected reliably, so it is declared.
* a :class:`ScriptedAgent`, a test or baseline policy (the oracles of
  :mod:`budgetmix.training.envs`): ``reset(env, seed)``, then
  ``act(observation, turns_remaining)``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from budgetmix.exceptions import BudgetmixError, ConfigError

__all__ = [
    "AgentReply",
    "AsyncEnvAgent",
    "EnvAgent",
    "EnvFactory",
    "EnvStateError",
    "Environment",
    "FaultInjection",
    "ScriptedAgent",
    "StepLabel",
    "StepResult",
    "Task",
    "is_async_agent",
    "unwrap",
]


class EnvStateError(BudgetmixError, RuntimeError):
    """``step()`` was called before ``reset()`` or after the episode ended."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StepLabel:
    """Per-step labels. ``mistake`` is a :class:`budgetmix.MistakeKind` value or ``None``."""

    valid: bool = True
    progress: bool = False
    mistake: str | None = None
    detail: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class StepResult:
    """What one action did."""

    observation: str
    reward: float = 0.0
    done: bool = False
    success: bool = False
    label: StepLabel = field(default_factory=StepLabel)
    info: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class Environment(Protocol):
    """A multi-turn text environment."""

    name: str

    def instructions(self) -> str:
        """The task statement shown once, before the first observation."""
        ...

    def reset(self, seed: int) -> str:
        """Start an episode for ``seed``; returns the first observation."""
        ...

    def step(self, action: str) -> StepResult:
        """Apply the model's action text."""
        ...


#: Builds a fresh environment (one per episode, so episodes can run concurrently).
EnvFactory = Callable[[], Environment]


@dataclass(frozen=True, slots=True, kw_only=True)
class Task:
    """One evaluation or training task: an environment factory and a seed."""

    task_id: str
    make_env: EnvFactory
    seed: int = 0
    metadata: Mapping[str, Any] = field(default_factory=dict)


def unwrap(env: Environment) -> Environment:
    """The innermost environment below wrappers that expose ``inner`` (:class:`FaultInjection`)."""
    while isinstance(getattr(env, "inner", None), Environment):
        env = env.inner  # type: ignore[attr-defined]
    return env


class FaultInjection:
    """Wrap any environment so chosen steps fail without reaching it.

    At each 1-based step in ``fail_at_step`` (an int or a collection) the action is
    rejected: the observation says so, nothing changes in the inner environment,
    and the label is ``mistake="env_action_failed"`` (``valid=True``: the action
    itself may have been fine). ``inner`` is the wrapped environment.

    Raises:
        ConfigError: a step < 1.
    """

    def __init__(
        self,
        env: Environment,
        fail_at_step: int | Collection[int],
        *,
        message: str = "Error: the environment failed to apply this action; nothing changed. "
        "Try again.",
    ) -> None:
        steps = frozenset({fail_at_step} if isinstance(fail_at_step, int) else fail_at_step)
        if any(s < 1 for s in steps):
            raise ConfigError("fail_at_step: steps are 1-based")
        self.inner = env
        self.fail_at_steps = steps
        self.message = message
        self.name = f"{env.name}+faults"
        self.steps = 0

    def instructions(self) -> str:
        """The wrapped environment's instructions."""
        return self.inner.instructions()

    def reset(self, seed: int) -> str:
        """Reset the wrapped environment and the step count."""
        self.steps = 0
        return self.inner.reset(seed)

    def step(self, action: str) -> StepResult:
        """Fail this step if it is a chosen one, else pass it through."""
        self.steps += 1
        if self.steps in self.fail_at_steps:
            return StepResult(
                observation=self.message,
                label=StepLabel(mistake="env_action_failed", detail="injected fault"),
                info={"injected_fault": True, "step": self.steps},
            )
        return self.inner.step(action)


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentReply:
    """An action with what producing it cost.

    ``result`` is set by an agent that took the step itself (a served checkpoint that
    drives a tool environment by its parsed calls): the environment's answer to this
    action, which the evaluator then uses instead of calling ``env.step(text)``.
    """

    text: str
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    result: StepResult | None = None


@runtime_checkable
class EnvAgent(Protocol):
    """A synchronous environment-playing agent (run in the evaluator's thread pool)."""

    sees_budget: bool

    def start(self, env: Environment, seed: int) -> None:
        """Prepare for a new episode of ``env`` (already reset)."""
        ...

    def act(
        self, observation: str, notice: str | None, turns_remaining: int | None
    ) -> str | AgentReply:
        """The action for this turn."""
        ...


@runtime_checkable
class AsyncEnvAgent(Protocol):
    """The async twin of :class:`EnvAgent` (``act`` is a coroutine)."""

    sees_budget: bool

    def start(self, env: Environment, seed: int) -> None:
        """Prepare for a new episode of ``env`` (already reset)."""
        ...

    async def act(
        self, observation: str, notice: str | None, turns_remaining: int | None
    ) -> str | AgentReply:
        """The action for this turn, as a coroutine the evaluator awaits."""
        ...


def is_async_agent(agent: EnvAgent | AsyncEnvAgent) -> bool:
    """Whether ``agent.act`` is a coroutine function."""
    return inspect.iscoroutinefunction(agent.act)


@runtime_checkable
class ScriptedAgent(Protocol):
    """An agent that acts from text, optionally told how many turns remain.

    ``turns_remaining`` is ``None`` when the agent is budget-blind (the harness
    does not tell it the budget).
    """

    def reset(self, env: Environment, seed: int) -> None:
        """Prepare to play ``env`` (already reset with ``seed``)."""
        ...

    def act(self, observation: str, turns_remaining: int | None) -> str:
        """The action text for this turn; ``turns_remaining`` counts this turn."""
        ...
