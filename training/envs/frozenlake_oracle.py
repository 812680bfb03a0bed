"""Exact value iteration for FrozenLake: the budget-aware optimum and the budget-blind baseline.

The model is the tabular MDP of gymnasium's ``FrozenLakeEnv`` (rebuilt here in
numpy so the oracle needs no gymnasium): from a frozen cell, action ``a`` moves in
direction ``a`` with probability ``success_rate`` and in each perpendicular
direction with probability ``(1 - success_rate) / 2`` when slippery; a move into
the border leaves the agent in place; ``G`` (success) and ``H`` (failure) end
the episode.

* :func:`finite_horizon_values` -- ``V[t][s]``, the highest probability of
  reaching ``G`` from ``s`` within ``t`` turns, and ``Q[t][s][a]``; acting with
  ``argmax Q[turns_remaining]`` is the budget-aware optimal policy.
* :func:`stationary_policy` -- the best budget-blind policy: greedy on the
  discounted value (``gamma`` close to 1, so it maximises success probability
  and, among equally safe routes, prefers the shorter one; the undiscounted
  greedy policy can dither forever between equally valued cells).
* :func:`policy_success_curve` / :func:`aware_success_curve` -- exact success
  probability from the start for every horizon ``0..T``.
* :func:`find_ceiling` and :func:`budget_gap` -- the paper's "ceiling" (the
  smallest T where the aware optimum reaches 90% of its no-limit success) and
  the aware-minus-blind gap at fractions of it.
* :class:`OptimalPolicy` -- the one implementation of optimal play: the move
  per cell and turns left (budget-aware) or per cell (budget-blind). The
  scripted oracle, the SFT demonstrators and the diagnostics' oracle policy
  all act through it.

Every solver here is the one MDP core's (:mod:`budgetmix.training.envs.mdp`,
``FrozenLakeModel.mdp``): this module builds the map's transitions and keeps the
FrozenLake-specific tie-breaking. numpy is imported inside the functions;
:class:`FrozenLakeModel` raises :class:`~budgetmix.exceptions.MissingExtraError`
when it is missing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from budgetmix._deps import require
from budgetmix._validate import check_between
from budgetmix.exceptions import ConfigError
from budgetmix.training.envs import mdp as core

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    FloatArray = npt.NDArray[np.float64]
    IntArray = npt.NDArray[np.intp]

__all__ = [
    "ACTIONS",
    "BudgetGap",
    "FrozenLakeModel",
    "OptimalPolicy",
    "aware_success_curve",
    "budget_gap",
    "discounted_values",
    "find_ceiling",
    "finite_horizon_values",
    "no_limit_success",
    "noisy_aware_success_curve",
    "policy_success_curve",
    "stationary_policy",
]

#: Action names in gymnasium's order (action id = index).
ACTIONS: tuple[str, ...] = ("left", "down", "right", "up")
_DELTAS = ((0, -1), (1, 0), (0, 1), (-1, 0))


@dataclass(frozen=True, eq=False)
class FrozenLakeModel:
    """The tabular MDP of one FrozenLake map.

    Attributes:
        desc: the map rows (``S`` start, ``F`` frozen, ``H`` hole, ``G`` goal).
        slippery: whether moves slip.
        success_rate: probability of moving in the intended direction when slippery.
        transitions: ``P[s, a, s']`` (terminal cells loop onto themselves).
        start: the start cell index (``row * ncol + col``).
        goal_mask / hole_mask: boolean masks over cells.
        mdp: the map as a :class:`~budgetmix.training.envs.mdp.TabularMDP`
            (success = ``G``, terminal = ``G`` or ``H``).

    Raises:
        ConfigError: ragged rows, unknown letters, not exactly one ``S`` and one
            ``G``, or ``success_rate`` outside ``[0, 1]``.
        MissingExtraError: numpy is not installed.
    """

    desc: tuple[str, ...]
    slippery: bool = True
    success_rate: float = 1.0 / 3.0
    transitions: FloatArray = field(init=False, repr=False)
    goal_mask: npt.NDArray[np.bool_] = field(init=False, repr=False)
    hole_mask: npt.NDArray[np.bool_] = field(init=False, repr=False)
    start: int = field(init=False)
    mdp: core.TabularMDP = field(init=False, repr=False)

    def __post_init__(self) -> None:
        require("numpy", "envs")
        import numpy as np

        desc = tuple(self.desc)
        object.__setattr__(self, "desc", desc)
        if not desc or any(len(row) != len(desc[0]) for row in desc) or not desc[0]:
            raise ConfigError("desc: rows must be non-empty and of equal length")
        text = "".join(desc)
        if set(text) - set("SFHG"):
            raise ConfigError(f"desc: unknown cell letters {sorted(set(text) - set('SFHG'))}")
        if text.count("S") != 1 or text.count("G") != 1:
            raise ConfigError("desc: the map needs exactly one S and one G")
        check_between("FrozenLakeModel.success_rate", self.success_rate, 0, 1)
        nrow, ncol = self.shape
        n = nrow * ncol
        probs = (
            {
                -1: (1.0 - self.success_rate) / 2.0,
                0: self.success_rate,
                1: (1.0 - self.success_rate) / 2.0,
            }
            if self.slippery
            else {0: 1.0}
        )
        p = np.zeros((n, 4, n), dtype=np.float64)
        for s, letter in enumerate(text):
            if letter in "GH":
                p[s, :, s] = 1.0
                continue
            row, col = divmod(s, ncol)
            for a in range(4):
                for offset, prob in probs.items():
                    dr, dc = _DELTAS[(a + offset) % 4]
                    r2 = min(max(row + dr, 0), nrow - 1)
                    c2 = min(max(col + dc, 0), ncol - 1)
                    p[s, a, r2 * ncol + c2] += prob
        cells = np.array(list(text))
        object.__setattr__(self, "transitions", p)
        object.__setattr__(self, "goal_mask", cells == "G")
        object.__setattr__(self, "hole_mask", cells == "H")
        object.__setattr__(self, "start", text.index("S"))
        mdp = core.TabularMDP(p, self.goal_mask, self.goal_mask | self.hole_mask, self.start)
        object.__setattr__(self, "mdp", mdp)

    @property
    def shape(self) -> tuple[int, int]:
        """``(nrow, ncol)``."""
        return len(self.desc), len(self.desc[0])

    @property
    def n_states(self) -> int:
        """Number of cells."""
        return len(self.desc) * len(self.desc[0])

    def target(self, state: int, action: int) -> int:
        """The cell the intended move leads to (``state`` itself at the border)."""
        nrow, ncol = self.shape
        row, col = divmod(state, ncol)
        dr, dc = _DELTAS[action]
        return min(max(row + dr, 0), nrow - 1) * ncol + min(max(col + dc, 0), ncol - 1)


def finite_horizon_values(model: FrozenLakeModel, horizon: int) -> tuple[FloatArray, FloatArray]:
    """Exact finite-horizon value iteration.

    Returns ``(V, Q)`` with shapes ``(horizon + 1, n_states)`` and
    ``(horizon + 1, n_states, 4)``: ``V[t][s]`` is the highest probability of
    reaching the goal from ``s`` with ``t`` turns left (``V[t][G] = 1``,
    ``V[t][H] = 0``), ``Q[t][s][a]`` the same after taking ``a`` first
    (``Q[0]`` is all zero except at ``G``). It is
    :func:`~budgetmix.training.envs.mdp.finite_horizon_values` on ``model.mdp``.

    Raises:
        ConfigError: ``horizon`` is negative.
    """
    return core.finite_horizon_values(model.mdp, horizon)


def aware_success_curve(model: FrozenLakeModel, horizon: int) -> FloatArray:
    """Success probability of the budget-aware optimum from the start, for T = 0..horizon."""
    v, _ = finite_horizon_values(model, horizon)
    return v[:, model.start].copy()


def noisy_aware_success_curve(
    model: FrozenLakeModel,
    horizon: int,
    error_rate: float,
    *,
    start_move: int | None = None,
) -> FloatArray:
    """Exact success of the budget-aware optimum *executed with errors*, for T = 0..horizon.

    At every turn the agent takes the exact optimum's move for (cell, turns left),
    ties broken as :class:`OptimalPolicy` (the demonstrators) breaks them,
    except that with probability ``error_rate`` it takes one of the three other
    moves at random (the noisy demonstrator's error model). ``start_move``, when
    given, replaces the intended move at the start cell at every budget (e.g.
    ``2``, right: "hurry at the start whatever the budget"). With
    ``error_rate=0`` and no ``start_move`` this is :func:`aware_success_curve`.
    It answers whether the optimum's budget-dependent choices still pay for an
    agent that errs: waiting on a safe cell is optimal only if later moves are.

    Raises:
        ConfigError: ``error_rate`` outside [0, 1], a bad ``start_move`` or horizon.
    """
    import numpy as np

    check_between("error_rate", error_rate, 0, 1)
    if start_move is not None and start_move not in range(4):
        raise ConfigError(f"start_move: must be an action id 0..3, got {start_move!r}")
    if horizon < 0:
        raise ConfigError(f"horizon: must be >= 0, got {horizon}")
    optimum = OptimalPolicy(model)
    intended = np.array(
        [[optimum.aware_move(s, k) for s in range(model.n_states)] for k in range(1, horizon + 1)],
        dtype=np.intp,
    ).reshape(horizon, model.n_states)
    if start_move is not None:
        intended[:, model.start] = start_move
    return core.turns_left_success_curve(model.mdp.with_errors(error_rate), intended, horizon)


def discounted_values(
    model: FrozenLakeModel, gamma: float = 0.999, *, tol: float = 1e-12, max_iter: int = 1_000_000
) -> tuple[FloatArray, IntArray]:
    """Infinite-horizon value iteration with reward 1 at ``G``, discounted by ``gamma`` per turn.

    Returns ``(V, policy)``: the optimal discounted values and the greedy
    stationary policy (ties go to the lowest action id). ``gamma = 1`` gives the
    maximum success probability with no turn limit.

    Raises:
        ConfigError: ``gamma`` outside ``(0, 1]``.
    """
    return core.discounted_values(model.mdp, gamma, tol=tol, max_iter=max_iter)


def no_limit_success(model: FrozenLakeModel) -> float:
    """The highest success probability from the start with no turn limit."""
    v, _ = discounted_values(model, 1.0)
    return float(v[model.start])


def stationary_policy(model: FrozenLakeModel, gamma: float = 0.999) -> IntArray:
    """The best budget-blind policy: one action per cell, whatever the turns left.

    It is greedy on the ``gamma``-discounted value (see the module notes).
    """
    return discounted_values(model, gamma)[1]


class OptimalPolicy:
    """Optimal moves on one map: ``argmax Q[turns_remaining][cell]``, or the stationary policy.

    Budget-aware moves come from exact finite-horizon value iteration; among the
    actions that tie at the optimum (many do when the budget has slack, e.g.
    bumping into the edge and then taking the shortest path) the one with the
    best ``gamma``-discounted value wins, i.e. the fastest, so no turn is wasted.
    The budget-blind move is :func:`stationary_policy` for ``gamma``. Tables are
    computed on first use and grown as longer budgets come.
    """

    def __init__(self, model: FrozenLakeModel, *, gamma: float = 0.999) -> None:
        self.model = model
        self.gamma = gamma
        self._q: FloatArray | None = None
        self._q_gamma: FloatArray | None = None
        self._stationary: IntArray | None = None

    def _discounted(self) -> tuple[FloatArray, IntArray]:
        if self._q_gamma is None or self._stationary is None:
            values, self._stationary = discounted_values(self.model, self.gamma)
            self._q_gamma = self.model.transitions @ values
        return self._q_gamma, self._stationary

    def blind_move(self, state: int) -> int:
        """The stationary policy's action id at cell ``state``."""
        return int(self._discounted()[1][state])

    def aware_move(self, state: int, turns_remaining: int) -> int:
        """The action id that maximises success within ``turns_remaining`` turns (the fastest)."""
        t = max(1, turns_remaining)
        if self._q is None or self._q.shape[0] <= t:
            self._q = finite_horizon_values(self.model, max(t, 64))[1]
        q_gamma = self._discounted()[0]
        return int(core.fastest_best(self._q[t, state], q_gamma[state]))

    def move(self, state: int, turns_remaining: int | None) -> int:
        """:meth:`aware_move`, or :meth:`blind_move` when ``turns_remaining`` is ``None``."""
        if turns_remaining is None:
            return self.blind_move(state)
        return self.aware_move(state, turns_remaining)


def policy_success_curve(
    model: FrozenLakeModel, policy: Sequence[int] | IntArray, horizon: int
) -> FloatArray:
    """Exact success probability of a stationary ``policy`` from the start, for T = 0..horizon.

    Raises:
        ConfigError: ``policy`` does not have one action in ``0..3`` per cell.
    """
    import numpy as np

    pol = np.asarray(policy, dtype=np.intp)
    if pol.shape != (model.n_states,) or pol.min() < 0 or pol.max() > 3:
        raise ConfigError("policy: needs one action id in 0..3 per cell")
    return core.turns_left_success_curve(model.mdp, pol, horizon)


def find_ceiling(model: FrozenLakeModel, fraction: float = 0.9, *, max_turns: int = 100_000) -> int:
    """Smallest T where the aware optimum reaches ``fraction`` of its no-limit success.

    Raises:
        ConfigError: ``fraction`` outside ``(0, 1]``, the goal is unreachable, or
            no T up to ``max_turns`` qualifies.
    """
    if not 0.0 < fraction <= 1.0:
        raise ConfigError(f"fraction: must be in (0, 1], got {fraction}")
    best = no_limit_success(model)
    if best <= 0.0:
        raise ConfigError("desc: the goal cannot be reached from the start")
    return core.find_ceiling(model.mdp, fraction, best=best, max_turns=max_turns)


@dataclass(frozen=True, slots=True)
class BudgetGap:
    """Aware-vs-blind success at fractions of the ceiling (probabilities, not points)."""

    ceiling: int
    fractions: tuple[float, ...]
    horizons: tuple[int, ...]
    aware: tuple[float, ...]
    blind: tuple[float, ...]

    @property
    def gaps(self) -> tuple[float, ...]:
        """``aware - blind`` per fraction (>= 0 up to float error)."""
        return tuple(a - b for a, b in zip(self.aware, self.blind, strict=True))


def budget_gap(
    model: FrozenLakeModel,
    fractions: Sequence[float] = (0.25, 0.5, 0.75, 1.0),
    *,
    ceiling_fraction: float = 0.9,
    gammas: Sequence[float] = (0.999,),
) -> BudgetGap:
    """Success of the aware optimum and of the stationary policy at ``round(f * ceiling)`` turns.

    Horizons are rounded to the nearest turn and at least 1. With several
    ``gammas`` the blind success at each horizon is the best of their stationary
    policies -- a stronger baseline than any single budget-blind policy (the
    choice of gamma then depends on T), so the gap it gives is conservative.

    Raises:
        ConfigError: as :func:`find_ceiling`, a fraction that is not positive, or
            no gammas.
    """
    import numpy as np

    if any(f <= 0 for f in fractions):
        raise ConfigError("fractions: must all be > 0")
    if not gammas:
        raise ConfigError("gammas: needs at least one discount")
    ceiling = find_ceiling(model, ceiling_fraction)
    horizons = tuple(max(1, math.floor(f * ceiling + 0.5)) for f in fractions)
    top = max(horizons)
    aware = aware_success_curve(model, top)
    blind = np.max(
        [policy_success_curve(model, stationary_policy(model, g), top) for g in gammas], axis=0
    )
    return BudgetGap(
        ceiling=ceiling,
        fractions=tuple(fractions),
        horizons=horizons,
        aware=tuple(float(aware[h]) for h in horizons),
        blind=tuple(float(blind[h]) for h in horizons),
    )
