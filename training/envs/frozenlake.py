"""FrozenLake as a text game, on gymnasium's ``FrozenLakeEnv``.

The model sees the grid (``S F H G`` with ``A`` at the agent) and one line on
what its last move did, and answers with a direction: ``left``, ``down``,
``right`` or ``up`` (case-insensitive). ``Action: <dir>`` wins if present,
otherwise the last direction word in the reply counts.

Labels per step:

* no direction in the reply: ``valid=False``, ``mistake="model_format_error"``;
  the agent does not move and the episode goes on.
* the intended move points at the border and the agent stays in place:
  ``mistake="env_action_failed"`` (a slip into the border is not the agent's
  mistake and is not labelled).
* ``progress``: the new cell's optimal discounted value (success probability,
  discounted by ``PROGRESS_GAMMA`` per turn, so that getting closer to the goal
  counts too) is higher than the old cell's, or the goal was reached.

:class:`FrozenLakeTools` (``frozenlake-tools``) is the same game played through a
``move(direction)`` tool.

Falling into a hole ends the episode (``success=False``); reaching ``G`` ends it
with reward 1. ``reset(seed)`` fixes the slip RNG and, for random maps without
``map_seed``, the map (``generate_random_map(size, p_frozen, seed=seed)``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from budgetmix._deps import require
from budgetmix.environment import EnvStateError, StepLabel, StepResult
from budgetmix.exceptions import ConfigError
from budgetmix.training.envs.frozenlake_oracle import ACTIONS, FrozenLakeModel, discounted_values
from budgetmix.training.envs.tool_env import ToolEnv, ToolMistake, ToolResult, env_tool

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "MAX_SIZE",
    "PROGRESS_GAMMA",
    "TOOLS_ENV_NAME",
    "FrozenLakeEnv",
    "FrozenLakeTools",
    "parse_action",
]

#: Largest side of a random map (1,024 cells: the exact oracle stays tractable).
MAX_SIZE = 32

#: Discount of the value used for the ``progress`` label.
PROGRESS_GAMMA = 0.99

_ACTION_LINE = re.compile(r"action\s*[:=]\s*[*`\"']*\s*(left|down|right|up)\b", re.IGNORECASE)
_WORD = re.compile(r"\b(left|down|right|up)\b", re.IGNORECASE)
_FIXED_MAPS = ("4x4", "8x8")


def parse_action(text: str) -> int | None:
    """The gymnasium action id in ``text`` (0 left, 1 down, 2 right, 3 up), or ``None``.

    The last ``Action: <dir>`` wins; without one, the last direction word.
    """
    found = _ACTION_LINE.findall(text) or _WORD.findall(text)
    return ACTIONS.index(found[-1].lower()) if found else None


def _frozen_lake_module() -> Any:
    return require("gymnasium", "envs", module="gymnasium.envs.toy_text.frozen_lake")


class FrozenLakeEnv:
    """FrozenLake with text observations and per-step labels.

    Args:
        map_name: ``"4x4"`` or ``"8x8"`` (gymnasium's fixed maps) or ``"random"``.
        desc: an explicit map (rows of ``S F H G``); overrides ``map_name``.
        size: side of random maps.
        p_frozen: probability that a random-map cell is frozen.
        map_seed: fixes the random map; ``None`` draws it from the reset seed.
        slippery: whether moves slip.
        success_rate: probability of moving in the intended direction when slippery
            (gymnasium's default is 1/3).

    Public attributes (read by scripted agents, valid after :meth:`reset`):
        ``model`` (the :class:`FrozenLakeModel` of the current map), ``desc``,
        ``state`` (the agent's cell index, ``row * ncol + col``), ``position``
        (``(row, col)``), ``turns`` (steps taken), ``done``, ``success``.

    Raises:
        ConfigError: an unknown ``map_name`` or a bad parameter.
        MissingExtraError: gymnasium is not installed.
    """

    name = "frozenlake"

    def __init__(
        self,
        *,
        map_name: str = "4x4",
        desc: Sequence[str] | None = None,
        size: int = 5,
        p_frozen: float = 0.8,
        map_seed: int | None = None,
        slippery: bool = True,
        success_rate: float = 1.0 / 3.0,
    ) -> None:
        self._gym_module = _frozen_lake_module()
        if desc is None and map_name not in (*_FIXED_MAPS, "random"):
            raise ConfigError(f"map_name: expected 4x4, 8x8 or random, got {map_name!r}")
        if isinstance(size, bool) or not isinstance(size, int) or not 2 <= size <= MAX_SIZE:
            raise ConfigError(f"size: must be an integer from 2 to {MAX_SIZE}, got {size!r}")
        if not 0.0 < p_frozen <= 1.0:
            raise ConfigError(f"p_frozen: must be in (0, 1], got {p_frozen}")
        if not 0.0 <= success_rate <= 1.0:
            raise ConfigError(f"success_rate: must be in [0, 1], got {success_rate}")
        self.map_name = "custom" if desc is not None else map_name
        self.size = size
        self.p_frozen = p_frozen
        self.map_seed = map_seed
        self.slippery = slippery
        self.success_rate = success_rate
        self._fixed_desc: tuple[str, ...] | None = None
        if desc is not None:
            self._fixed_desc = tuple(desc)
        elif map_name in _FIXED_MAPS:
            self._fixed_desc = tuple(self._gym_module.MAPS[map_name])
        elif map_seed is not None:
            self._fixed_desc = self._random_map(map_seed)
        if self._fixed_desc is not None:
            FrozenLakeModel(self._fixed_desc, slippery, success_rate)  # validates the map early
        self._gym: Any = None
        self._gym_desc: tuple[str, ...] | None = None
        self._model: FrozenLakeModel | None = None
        self._values: npt.NDArray[np.float64] | None = None
        self.state = 0
        self.turns = 0
        self.done = False
        self.success = False
        self._last = ""

    def _random_map(self, seed: int) -> tuple[str, ...]:
        return tuple(self._gym_module.generate_random_map(self.size, self.p_frozen, seed=seed))

    @property
    def model(self) -> FrozenLakeModel:
        """The MDP of the current map. Raises :class:`EnvStateError` before ``reset``."""
        if self._model is None:
            raise EnvStateError("call reset() first")
        return self._model

    @property
    def desc(self) -> tuple[str, ...]:
        """The current map rows."""
        return self.model.desc

    @property
    def position(self) -> tuple[int, int]:
        """``(row, col)`` of the agent."""
        return divmod(self.state, self.model.shape[1])

    def instructions(self) -> str:
        """The rules, the legend, the slip model and the action format."""
        if self.slippery:
            side = (1.0 - self.success_rate) / 2.0
            slip = (
                f"The ice is slippery: a move goes in the intended direction with probability "
                f"{self.success_rate:.0%} and to each of the two perpendicular directions with "
                f"probability {side:.0%}."
            )
        else:
            slip = "The ice is not slippery: every move goes where you intend."
        return (
            "You are on a frozen lake drawn as a grid. S = start, F = frozen (safe), "
            "H = hole, G = goal, A = you. Reach G without falling into a hole; falling "
            "into a hole ends the game. Moving into the edge of the grid leaves you "
            f"where you are. {slip} Each turn, reply with one move: left, down, right or "
            "up, for example `Action: right`."
        )

    def reset(self, seed: int) -> str:
        """Start an episode; the seed fixes the slip RNG (and a random map)."""
        desc = self._fixed_desc if self._fixed_desc is not None else self._random_map(seed)
        if self._gym is None or self._gym_desc != desc:
            self._gym = self._gym_module.FrozenLakeEnv(
                desc=list(desc), is_slippery=self.slippery, success_rate=self.success_rate
            )
            self._gym_desc = desc
            self._model = FrozenLakeModel(desc, self.slippery, self.success_rate)
            self._values = discounted_values(self._model, PROGRESS_GAMMA)[0]
        state, _ = self._gym.reset(seed=seed)
        self.state = int(state)
        self.turns = 0
        self.done = False
        self.success = False
        self._last = "The game has started; you are on S."
        return self._render()

    def step(self, action: str) -> StepResult:
        """Apply one move parsed from ``action``.

        Raises:
            EnvStateError: before ``reset`` or after the episode ended.
        """
        if self._model is None or self._values is None:
            raise EnvStateError("call reset() first")
        if self.done:
            raise EnvStateError("the episode has ended; call reset()")
        model, values = self._model, self._values
        self.turns += 1
        move = parse_action(action)
        if move is None:
            self._last = (
                "Your reply had no move (expected left, down, right or up); you did not move."
            )
            label = StepLabel(valid=False, mistake="model_format_error", detail="no direction")
            return StepResult(observation=self._render(), label=label, info=self._info(None))
        before = self.state
        state, _, terminated, _, _ = self._gym.step(move)
        self.state = int(state)
        name = ACTIONS[move]
        intended = model.target(before, move)
        mistake: str | None = None
        if self.state == before:
            if intended == before:
                mistake = "env_action_failed"
                self._last = f"You tried to move {name} into the edge and did not move."
            else:
                self._last = f"You tried to move {name}, slipped into the edge and did not move."
        elif self.state == intended:
            self._last = f"You moved {name}."
        else:
            self._last = f"You tried to move {name} but slipped {self._direction(before)}."
        cell = model.desc[self.position[0]][self.position[1]]
        self.success = cell == "G"
        self.done = bool(terminated) or cell in "GH"
        if cell == "H":
            self._last += " You fell into a hole. The game is over."
        elif self.success:
            self._last += " You reached the goal!"
        progress = self.success or bool(values[self.state] > values[before] + 1e-12)
        detail = "border" if mistake else ("slipped" if self.state != intended else "")
        label = StepLabel(valid=True, progress=progress, mistake=mistake, detail=detail)
        return StepResult(
            observation=self._render(),
            reward=1.0 if self.success else 0.0,
            done=self.done,
            success=self.success,
            label=label,
            info=self._info(name),
        )

    def _direction(self, before: int) -> str:
        ncol = self.model.shape[1]
        (r0, c0), (r1, c1) = divmod(before, ncol), divmod(self.state, ncol)
        return {(0, -1): "left", (1, 0): "down", (0, 1): "right", (-1, 0): "up"}[(r1 - r0, c1 - c0)]

    def _info(self, action: str | None) -> dict[str, Any]:
        return {"position": self.position, "action": action, "turn": self.turns}

    def _render(self) -> str:
        row_a, col_a = self.position
        rows = [
            " ".join("A" if (r, c) == (row_a, col_a) else ch for c, ch in enumerate(line))
            for r, line in enumerate(self.desc)
        ]
        nrow, ncol = self.model.shape
        where = f"You are at row {row_a}, column {col_a} (rows 0-{nrow - 1}, columns 0-{ncol - 1})."
        return "\n".join([*rows, where, f"Last: {self._last}"])


#: The registry's name of :class:`FrozenLakeTools`.
TOOLS_ENV_NAME = "frozenlake-tools"


class FrozenLakeTools(ToolEnv):
    """FrozenLake played through one tool, ``move(direction)``; same map, dynamics and labels.

    Takes :class:`FrozenLakeEnv`'s arguments and wraps one (``inner``, so
    :func:`~budgetmix.environment.unwrap`, the oracles and the demonstrators see its
    state). A move into the edge raises :class:`ToolMistake` (``env_action_failed``,
    the observation as its message); a reply without a tool call ends the episode
    (what ``run_agent`` does with one). The text protocol takes ``<tool_call>``
    blocks (:meth:`ToolEnv.step`).

    Raises:
        ConfigError: as :class:`FrozenLakeEnv`.
        MissingExtraError: gymnasium is not installed.
    """

    name = TOOLS_ENV_NAME

    def __init__(self, **kwargs: Any) -> None:
        self.inner = FrozenLakeEnv(**kwargs)

    def instructions(self) -> str:
        """The FrozenLake rules, moves made with the ``move`` tool."""
        rules = self.inner.instructions()
        return rules[: rules.index(" Each turn, reply")] + " Each turn, call the move tool once."

    def start(self, seed: int) -> str:
        """Reset the lake for ``seed``; returns the grid."""
        return self.inner.reset(seed)

    @env_tool
    def move(self, direction: Literal["left", "down", "right", "up"]) -> ToolResult:
        """Move one cell on the ice (you may slip).

        Args:
            direction: left, down, right or up.
        """
        result = self.inner.step(f"Action: {direction}")
        if result.label.mistake is not None:
            raise ToolMistake(result.observation, result.label.mistake)
        return ToolResult(
            output=result.observation,
            progress=result.label.progress,
            done=result.done,
            success=result.success,
            reward=result.reward,
            detail=result.label.detail,
        )
