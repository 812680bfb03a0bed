"""``frozenlake-compact``, the experiment's environment: slippery FrozenLake with one-token moves.

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

The registry (:mod:`budgetmix.training.envs.registry`) knows it as
``frozenlake-compact``, with a budget-*blind* noisy demonstrator (the
stationary oracle policy plus random wrong moves, in move letters), the
experiment's base policy.
"""

from __future__ import annotations

from collections.abc import Sequence

from budgetmix.environment import StepLabel, StepResult
from budgetmix.exceptions import ConfigError
from budgetmix.training.envs.frozenlake import FrozenLakeEnv, parse_action
from budgetmix.training.envs.frozenlake_oracle import ACTIONS, FrozenLakeModel

__all__ = [
    "CELL_NAMES",
    "COMPACT_ENV_NAME",
    "DEMO_MAP",
    "MOVE_LETTERS",
    "OBS_REPEAT",
    "CompactFrozenLake",
    "parse_move",
]

#: One letter per gymnasium action id (0 left, 1 down, 2 right, 3 up).
MOVE_LETTERS = "ldru"
#: Cell names, row by row (``at A`` is the top-left cell).
CELL_NAMES = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
#: Copies of the cell letter in an observation (see the module notes).
OBS_REPEAT = 6
#: The name the environment registry knows this environment by.
COMPACT_ENV_NAME = "frozenlake-compact"
#: The demo's map (the experiment's default ``desc``, slip 0.8).
DEMO_MAP: tuple[str, ...] = ("SFF", "HFF", "HHG")


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
