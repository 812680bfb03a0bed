"""Play an environment with a scripted agent: :class:`ScriptedEnvAgent`.

It adapts a :class:`~budgetmix.environment.ScriptedAgent` (the oracles of
:mod:`budgetmix.training.envs`: ``reset(env, seed)`` / ``act(observation,
turns_remaining)``) to the evaluator's :class:`~budgetmix.environment.EnvAgent`.
A chat model plays through :class:`~budgetmix.adapters.env_agent.ChatModelEnvAgent`.
"""

from __future__ import annotations

from budgetmix.environment import Environment, ScriptedAgent

__all__ = ["ScriptedEnvAgent"]


class ScriptedEnvAgent:
    """Adapts a scripted agent; with ``sees_budget=False`` it is given no budget.

    The scripted agent is reset with the episode seed; a budget-aware one (the
    FrozenLake oracle) gets ``turns_remaining``, a blind one gets ``None``.
    """

    def __init__(self, agent: ScriptedAgent, *, sees_budget: bool = True) -> None:
        self.agent = agent
        self.sees_budget = sees_budget

    def start(self, env: Environment, seed: int) -> None:
        """Reset the scripted agent for a new episode of ``env`` with the episode seed."""
        self.agent.reset(env, seed)

    def act(self, observation: str, notice: str | None, turns_remaining: int | None) -> str:
        """The scripted agent's action; ``notice`` is ignored, ``turns_remaining`` is
        passed on only when ``sees_budget`` (``None`` otherwise)."""
        return self.agent.act(observation, turns_remaining if self.sees_budget else None)
