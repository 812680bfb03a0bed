"""The experiment's environment: slippery FrozenLake with one-token moves and compact text.

A tiny char-level model trained on a laptop CPU pays for every character of
context, turn after turn, so :class:`CompactFrozenLake` wraps
:class:`~budgetmix.training.envs.frozenlake.FrozenLakeEnv` (same dynamics, same
labels, same oracle) and only changes the text:

* the observation is the agent's cell as one letter repeated, ``E E E E E E``
  (cells are named ``A, B, C, ...`` row by row; the map is fixed and stated once
  in the instructions). Both choices are about what a tiny model can learn in a
  few CPU minutes: the state sits some 40 tokens before the reply (the budget
  notice comes last), and a 2-layer, hidden-64 model trained to map the state to
  the demonstrator's move stayed at the marginal action distribution for 300
  steps with ``r1c2`` or ``at E``, but learned the map in about 75 steps with
  six copies of one letter (more attention mass on the state early on);
* a move is one letter, ``l``/``d``/``r``/``u`` (full words are accepted too).

``inner`` exposes the wrapped env, so :func:`~budgetmix.environment.unwrap`,
the FrozenLake oracle and the diagnostics see the real state. The budget notice
is not part of the observation: rollouts and the controller append it.

:func:`register_compact_frozenlake` adds the environment to the trainer's
registry as ``frozenlake-compact`` with a budget-*blind* noisy demonstrator
(the stationary oracle policy plus random wrong moves), the issue's base policy.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from budgetmix.environment import StepLabel, StepResult, Task
from budgetmix.exceptions import ConfigError
from budgetmix.training.envs.frozenlake import FrozenLakeEnv, parse_action
from budgetmix.training.envs.frozenlake_oracle import ACTIONS, FrozenLakeModel, stationary_policy

__all__ = [
    "CELL_NAMES",
    "COMPACT_ENV_NAME",
    "MOVE_LETTERS",
    "OBS_REPEAT",
    "BlindNoisyDemonstrator",
    "CompactFrozenLake",
    "compact_tasks",
    "parse_move",
    "register_compact_frozenlake",
]

#: One letter per gymnasium action id (0 left, 1 down, 2 right, 3 up).
MOVE_LETTERS = "ldru"
#: Cell names, row by row (``at A`` is the top-left cell).
CELL_NAMES = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
#: Copies of the cell letter in an observation (see the module notes).
OBS_REPEAT = 6
#: The name the trainer's registry knows this environment by.
COMPACT_ENV_NAME = "frozenlake-compact"


def parse_move(text: str) -> int | None:
    """The action id of a one-letter move (``l d r u``) or of a direction word; else ``None``."""
    stripped = text.strip().lower()
    if len(stripped) == 1:
        idx = MOVE_LETTERS.find(stripped)
        return idx if idx >= 0 else None
    return parse_action(text)


class CompactFrozenLake:
    """FrozenLake on a fixed map, observations ``<cell letter>`` x6, one-letter moves.

    Args:
        desc: the map rows (``S F H G``).
        success_rate: probability that a move goes where intended (slippery ice).
        slippery: whether moves slip.

    Raises:
        ConfigError: an invalid map or rate.
        MissingExtraError: gymnasium is not installed.
    """

    name = COMPACT_ENV_NAME

    def __init__(
        self, desc: Sequence[str], success_rate: float = 0.8, *, slippery: bool = True
    ) -> None:
        self.inner = FrozenLakeEnv(desc=list(desc), slippery=slippery, success_rate=success_rate)
        self.desc = tuple(desc)
        if len(self.desc) * len(self.desc[0]) > len(CELL_NAMES):
            raise ConfigError(f"desc: at most {len(CELL_NAMES)} cells")

    @property
    def state(self) -> int:
        """The agent's cell index (``row * ncol + col``)."""
        return self.inner.state

    @property
    def model(self) -> FrozenLakeModel:
        """The exact MDP of the map."""
        return self.inner.model

    def instructions(self) -> str:
        """The map and the move letters, in one short line."""
        return f"Ice {'/'.join(self.desc)}, you see your cell A.. by rows. Reach G. Move: l d r u."

    def _obs(self) -> str:
        return " ".join([CELL_NAMES[self.inner.state]] * OBS_REPEAT)

    def reset(self, seed: int) -> str:
        """Start at ``S``; ``seed`` fixes the slips."""
        self.inner.reset(seed)
        return self._obs()

    def step(self, action: str) -> StepResult:
        """Apply one move; an unparseable reply is a format mistake and the agent stays."""
        move = parse_move(action)
        if move is None:
            self.inner.step("")  # counts the turn and labels the format error
            label = StepLabel(valid=False, mistake="model_format_error", detail="no move")
            return StepResult(observation=self._obs(), label=label, info={"action": None})
        result = self.inner.step(ACTIONS[move])
        return StepResult(
            observation=self._obs(),
            reward=result.reward,
            done=result.done,
            success=result.success,
            label=result.label,
            info=result.info,
        )


def compact_tasks(seeds: Sequence[int], kwargs: Mapping[str, Any]) -> list[Task]:
    """One :class:`Task` per seed (the seed drives the slips; the map is fixed).

    Raises:
        ConfigError: ``kwargs`` lack ``desc`` or hold a bad map.
    """
    if "desc" not in kwargs:
        raise ConfigError("env_kwargs.desc: frozenlake-compact needs the map rows")
    desc = tuple(str(r) for r in kwargs["desc"])
    rate = float(kwargs.get("success_rate", 0.8))
    CompactFrozenLake(desc, rate)  # validate once
    return [
        Task(
            task_id=f"{COMPACT_ENV_NAME}-{s}",
            make_env=lambda: CompactFrozenLake(desc, rate),
            seed=s,
        )
        for s in seeds
    ]


class BlindNoisyDemonstrator:
    """Budget-blind demonstrations: the stationary oracle move, a wrong one at ``error_rate``.

    Blind on purpose: the action depends on the cell only, never on the
    notice, so a model cloned from it starts out ignoring its budget. ``gamma``
    picks the stationary policy (:func:`stationary_policy`): close to 1 it is
    patient (safe, slow), lower it hurries.
    """

    def __init__(
        self,
        desc: Sequence[str],
        success_rate: float,
        error_rate: float,
        seed: int,
        *,
        gamma: float = 0.99,
    ) -> None:
        if not 0.0 <= error_rate <= 1.0:
            raise ConfigError(f"error_rate: must be in [0, 1], got {error_rate}")
        model = FrozenLakeModel(tuple(desc), True, success_rate)
        self.policy = [int(a) for a in stationary_policy(model, gamma)]
        self.error_rate = error_rate
        self.rng = random.Random(f"blind-demo:{seed}")

    def action_for(self, state: int) -> str:
        """The (possibly wrong) move letter for ``state``."""
        best = self.policy[state]
        if self.rng.random() < self.error_rate:
            best = self.rng.choice([a for a in range(4) if a != best])
        return MOVE_LETTERS[best]

    def __call__(self, request: Any) -> str:
        """The trainer's demo-agent hook: ``request.env`` is the live environment."""
        env = request.env
        if not isinstance(env, CompactFrozenLake):
            raise ConfigError(
                f"env: expected {COMPACT_ENV_NAME}, got {getattr(env, 'name', env)!r}"
            )
        return self.action_for(env.state)


def _demo_agent(kwargs: Mapping[str, Any], error_rate: float, seed: int) -> BlindNoisyDemonstrator:
    return BlindNoisyDemonstrator(
        tuple(kwargs["desc"]),
        float(kwargs.get("success_rate", 0.8)),
        error_rate,
        seed,
        gamma=float(kwargs.get("demo_gamma", 0.99)),
    )


def register_compact_frozenlake() -> None:
    """Add ``frozenlake-compact`` to the trainer's environment registry (idempotent).

    Raises:
        MissingExtraError: the training extra (torch) is not installed.
    """
    from budgetmix.training.tasks import ENVIRONMENTS, EnvSpec

    if COMPACT_ENV_NAME not in ENVIRONMENTS:
        ENVIRONMENTS[COMPACT_ENV_NAME] = EnvSpec(COMPACT_ENV_NAME, compact_tasks, _demo_agent)
