"""Scripted agents for tests and baselines.

Each is a :class:`~budgetmix.environment.ScriptedAgent`: reset with the
environment it will play and a seed, then asked for one action text per turn.
``turns_remaining`` is ``None`` when the agent is budget-blind (the harness does
not tell it the budget).

Scripted agents read the environment's documented public attributes, below any
wrapper (see :func:`~budgetmix.environment.unwrap`):

* :class:`FrozenLakeOracle` and :class:`FrozenLakeDemonstrator` (the noisy
  SFT demonstrator): ``FrozenLakeEnv.model`` and ``.state``;
* :class:`FaultyToolsOracle`: ``FaultyToolsEnv.start_key`` and ``.table`` (for
  wrong keys only); it follows the chain from the observations;
* :class:`HumanEvalOracle`: ``HumanEvalEnv.problem``;
* :class:`RandomAgent`: what :func:`example_actions` reads.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from budgetmix.environment import Environment, ScriptedAgent, StepResult, unwrap
from budgetmix.exceptions import ConfigError
from budgetmix.training.envs.faulty_tools import FaultyToolsEnv
from budgetmix.training.envs.frozenlake import FrozenLakeEnv
from budgetmix.training.envs.frozenlake_oracle import ACTIONS, FrozenLakeModel, OptimalPolicy
from budgetmix.training.envs.humaneval import HumanEvalEnv

if TYPE_CHECKING:
    from budgetmix.training.rollouts.generation import GenerationRequest

__all__ = [
    "INVALID_ACTIONS",
    "FaultyToolsOracle",
    "FrozenLakeDemonstrator",
    "FrozenLakeOracle",
    "HumanEvalOracle",
    "NoisyOracle",
    "RandomAgent",
    "SupportsWrongAction",
    "example_actions",
    "play",
]

#: Replies no built-in environment can parse (they label as ``model_format_error``).
INVALID_ACTIONS: tuple[str, ...] = ("", "I am not sure what to do.", "???")


@runtime_checkable
class SupportsWrongAction(Protocol):
    """An oracle that can produce a plausible but wrong action (for :class:`NoisyOracle`)."""

    def wrong_action(
        self, observation: str, turns_remaining: int | None, rng: random.Random
    ) -> str:
        """A well-formed action the oracle would not take now."""
        ...


def _broken_code(env: HumanEvalEnv) -> str:
    return f"```python\n{env.problem['prompt'].rstrip()}\n    return None\n```"


def example_actions(env: Environment) -> tuple[str, ...]:
    """Well-formed actions for a built-in environment (reset already).

    Raises:
        ConfigError: the environment is not a built-in one.
    """
    inner = unwrap(env)
    if isinstance(inner, FrozenLakeEnv):
        return ACTIONS
    if isinstance(inner, FaultyToolsEnv):
        calls = [f"call lookup {json.dumps({'key': k})}" for k in sorted(inner.table)]
        return (*calls, "call list_keys {}", "answer unknown")
    if isinstance(inner, HumanEvalEnv):
        return (_broken_code(inner), "```python\npass\n```")
    raise ConfigError(f"env: no example actions for {getattr(env, 'name', env)!r}")


class RandomAgent:
    """Uniformly random actions; with probability ``invalid_rate`` an unparseable reply.

    ``actions`` defaults to :func:`example_actions` of the environment. Seeded by ``reset``.

    Raises:
        ConfigError: ``invalid_rate`` outside ``[0, 1]`` or empty ``actions``.
    """

    def __init__(self, *, invalid_rate: float = 0.2, actions: Sequence[str] | None = None) -> None:
        if not 0.0 <= invalid_rate <= 1.0:
            raise ConfigError(f"invalid_rate: must be in [0, 1], got {invalid_rate}")
        if actions is not None and not actions:
            raise ConfigError("actions: must not be empty")
        self.invalid_rate = invalid_rate
        self._given = tuple(actions) if actions is not None else None
        self._actions: tuple[str, ...] = ()
        self._rng = random.Random(0)

    def reset(self, env: Environment, seed: int) -> None:
        """Seed the RNG and collect the action set."""
        self._rng = random.Random(f"random-agent:{seed}")
        self._actions = self._given if self._given is not None else example_actions(env)

    def act(self, observation: str, turns_remaining: int | None) -> str:
        """A random valid action, or an invalid reply with probability ``invalid_rate``."""
        if self._rng.random() < self.invalid_rate:
            return self._rng.choice(INVALID_ACTIONS)
        return self._rng.choice(self._actions)


class FrozenLakeOracle:
    """Optimal FrozenLake play from the exact model (:class:`OptimalPolicy`).

    Budget-aware (default): ``argmax Q[turns_remaining][state]`` from finite-horizon
    value iteration (ties go to the action with the best ``gamma``-discounted value,
    i.e. the fastest of the optimal moves). With ``budget_blind=True``, or when
    ``turns_remaining`` is ``None``, the stationary policy of :func:`stationary_policy`.

    Raises:
        ConfigError: (on ``reset``) the environment is not a FrozenLake one.
    """

    def __init__(self, *, budget_blind: bool = False, gamma: float = 0.999) -> None:
        self.budget_blind = budget_blind
        self.gamma = gamma
        self._env: FrozenLakeEnv | None = None
        self._policy: OptimalPolicy | None = None

    def reset(self, env: Environment, seed: int) -> None:
        """Bind to the (reset) environment; recompute the tables when the map changed."""
        inner = unwrap(env)
        if not isinstance(inner, FrozenLakeEnv):
            raise ConfigError(f"env: FrozenLakeOracle needs a FrozenLakeEnv, got {env.name!r}")
        self._env = inner
        if self._policy is None or self._policy.model is not inner.model:
            self._policy = OptimalPolicy(inner.model, gamma=self.gamma)

    def _choice(self, turns_remaining: int | None) -> int:
        if self._env is None or self._policy is None:
            raise ConfigError("agent: call reset() first")
        return self._policy.move(self._env.state, None if self.budget_blind else turns_remaining)

    def act(self, observation: str, turns_remaining: int | None) -> str:
        """``Action: <direction>`` of the optimal move."""
        return f"Action: {ACTIONS[self._choice(turns_remaining)]}"

    def wrong_action(
        self, observation: str, turns_remaining: int | None, rng: random.Random
    ) -> str:
        """A direction other than the optimal one."""
        best = self._choice(turns_remaining)
        return f"Action: {rng.choice([a for i, a in enumerate(ACTIONS) if i != best])}"


class FrozenLakeDemonstrator:
    """The optimal move (:class:`OptimalPolicy`), replaced by a random other one at ``error_rate``.

    The scripted demonstrator of SFT (``demonstrator(request)``, the trainer's
    demo-agent hook: ``request.env`` is the live environment, any FrozenLake
    below wrappers) and the diagnostics' oracle policy (:meth:`move`). Budget-aware
    by default; ``budget_blind`` acts on the stationary policy whatever the budget
    (a model cloned from it starts out ignoring its budget). ``moves`` are the
    texts of action ids 0..3; ``seed`` seeds the error draws. With ``tool_call`` the
    demonstration is an assistant message calling ``move(direction)`` (for
    :class:`~budgetmix.training.envs.frozenlake.FrozenLakeTools`).

    Raises:
        ConfigError: ``error_rate`` outside ``[0, 1]``, or (when called) an
            environment that is not a FrozenLake one.
    """

    def __init__(
        self,
        error_rate: float,
        seed: int | str,
        *,
        budget_blind: bool = False,
        gamma: float = 0.999,
        moves: Sequence[str] = ACTIONS,
        tool_call: bool = False,
    ) -> None:
        if not 0.0 <= error_rate <= 1.0:
            raise ConfigError(f"error_rate: must be in [0, 1], got {error_rate}")
        self.error_rate = error_rate
        self.budget_blind = budget_blind
        self.gamma = gamma
        self.moves = tuple(moves)
        self.tool_call = tool_call
        self.rng = random.Random(seed)
        self._policies: dict[tuple[tuple[str, ...], bool, float], OptimalPolicy] = {}

    def move(self, model: FrozenLakeModel, state: int, turns_remaining: int) -> str:
        """The (possibly wrong) move text at cell ``state`` of ``model``'s map."""
        key = (model.desc, model.slippery, model.success_rate)
        policy = self._policies.get(key)
        if policy is None:
            policy = self._policies[key] = OptimalPolicy(model, gamma=self.gamma)
        best = policy.move(state, None if self.budget_blind else turns_remaining)
        if self.error_rate and self.rng.random() < self.error_rate:
            best = self.rng.choice([a for a in range(4) if a != best])
        return self.moves[best]

    def __call__(self, request: GenerationRequest) -> str | dict[str, Any]:
        """The move for the live environment of ``request`` and the turns its ledger has
        left: its text, or (``tool_call``) an assistant message calling ``move``."""
        inner = unwrap(request.env)
        if not isinstance(inner, FrozenLakeEnv):
            raise ConfigError(
                f"env: FrozenLakeDemonstrator needs a FrozenLake env, got {request.env.name!r}"
            )
        move = self.move(inner.model, inner.state, request.state.turns_remaining)
        if not self.tool_call:
            return move
        call = {"name": "move", "arguments": {"direction": move}}
        return {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": f"call_{inner.turns}", "type": "function", "function": call}],
        }


_LOOKUP = re.compile(r"lookup\('([^']*)'\) -> '([^']*)'")


class FaultyToolsOracle:
    """Follows the pointer chain with ``lookup``, retrying failed calls, then answers.

    Raises:
        ConfigError: (on ``reset``) the environment is not a FaultyTools one.
    """

    def __init__(self) -> None:
        self._env: FaultyToolsEnv | None = None
        self._target = ""
        self._final: str | None = None

    def reset(self, env: Environment, seed: int) -> None:
        """Start from the environment's ``start_key``."""
        inner = unwrap(env)
        if not isinstance(inner, FaultyToolsEnv):
            raise ConfigError(f"env: FaultyToolsOracle needs a FaultyToolsEnv, got {env.name!r}")
        self._env = inner
        self._target = inner.start_key
        self._final = None

    def act(self, observation: str, turns_remaining: int | None) -> str:
        """Look up the current key (again, if the last call failed) or answer."""
        match = _LOOKUP.search(observation)
        if match and match.group(1) == self._target and self._final is None:
            value = match.group(2)
            if value.startswith("see "):
                self._target = value[4:]
            else:
                self._final = value
        if self._final is not None:
            return f"answer {self._final}"
        return f"call lookup {json.dumps({'key': self._target})}"

    def wrong_action(
        self, observation: str, turns_remaining: int | None, rng: random.Random
    ) -> str:
        """A lookup of some other key, or malformed arguments."""
        if self._env is None:
            raise ConfigError("agent: call reset() first")
        others = sorted(k for k in self._env.table if k != self._target)
        if not others or rng.random() < 0.5:
            return "call lookup {key: " + self._target + "}"
        return f"call lookup {json.dumps({'key': rng.choice(others)})}"


class HumanEvalOracle:
    """Submits the canonical solution, after ``broken_attempts`` submissions that fail.

    Raises:
        ConfigError: ``broken_attempts`` < 0, or (on ``reset``) a non-HumanEval env.
    """

    def __init__(self, *, broken_attempts: int = 0) -> None:
        if broken_attempts < 0:
            raise ConfigError(f"broken_attempts: must be >= 0, got {broken_attempts}")
        self.broken_attempts = broken_attempts
        self._env: HumanEvalEnv | None = None
        self._submitted = 0

    def reset(self, env: Environment, seed: int) -> None:
        """Bind to the environment's current problem."""
        inner = unwrap(env)
        if not isinstance(inner, HumanEvalEnv):
            raise ConfigError(f"env: HumanEvalOracle needs a HumanEvalEnv, got {env.name!r}")
        self._env = inner
        self._submitted = 0

    def _bound(self) -> HumanEvalEnv:
        if self._env is None:
            raise ConfigError("agent: call reset() first")
        return self._env

    def act(self, observation: str, turns_remaining: int | None) -> str:
        """A fenced code block: broken first if asked, then prompt + canonical solution."""
        env = self._bound()
        self._submitted += 1
        if self._submitted <= self.broken_attempts:
            return _broken_code(env)
        problem = env.problem
        return f"```python\n{problem['prompt']}{problem['canonical_solution']}```"

    def wrong_action(
        self, observation: str, turns_remaining: int | None, rng: random.Random
    ) -> str:
        """A submission that returns ``None``."""
        return _broken_code(self._bound())


class NoisyOracle:
    """An oracle that errs with probability ``mistake_rate`` and recovers right after.

    A mistake is an unparseable reply (with probability ``invalid_fraction``) or,
    if the oracle supports it, a well-formed wrong action. A mistake is always
    followed by an oracle action, so two mistakes never come in a row. Seeded by
    ``reset``.

    Raises:
        ConfigError: a rate outside ``[0, 1]``.
    """

    def __init__(
        self, oracle: ScriptedAgent, *, mistake_rate: float = 0.2, invalid_fraction: float = 0.5
    ) -> None:
        for name, value in (("mistake_rate", mistake_rate), ("invalid_fraction", invalid_fraction)):
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"{name}: must be in [0, 1], got {value}")
        self.oracle = oracle
        self.mistake_rate = mistake_rate
        self.invalid_fraction = invalid_fraction
        self.mistakes = 0
        self._rng = random.Random(0)
        self._erred = False

    def reset(self, env: Environment, seed: int) -> None:
        """Reset the oracle and seed the mistake RNG."""
        self.oracle.reset(env, seed)
        self._rng = random.Random(f"noisy:{seed}")
        self._erred = False
        self.mistakes = 0

    def act(self, observation: str, turns_remaining: int | None) -> str:
        """The oracle's action, or (sometimes) a mistake."""
        if not self._erred and self._rng.random() < self.mistake_rate:
            self._erred = True
            self.mistakes += 1
            oracle = self.oracle
            if (
                isinstance(oracle, SupportsWrongAction)
                and self._rng.random() >= self.invalid_fraction
            ):
                return oracle.wrong_action(observation, turns_remaining, self._rng)
            return self._rng.choice(INVALID_ACTIONS[1:])
        self._erred = False
        return self.oracle.act(observation, turns_remaining)


def play(
    env: Environment, agent: ScriptedAgent, *, seed: int, max_turns: int, tell_budget: bool = True
) -> list[StepResult]:
    """Play one episode of at most ``max_turns`` steps; returns the step results.

    ``tell_budget=False`` passes ``turns_remaining=None`` (a budget-blind agent).
    """
    observation = env.reset(seed)
    agent.reset(env, seed)
    results: list[StepResult] = []
    for turn in range(max_turns):
        remaining = max_turns - turn if tell_budget else None
        result = env.step(agent.act(observation, remaining))
        results.append(result)
        observation = result.observation
        if result.done:
            break
    return results
