"""The one exact finite-horizon MDP core: every oracle (FrozenLake, the tool chains) solves on it.

A :class:`TabularMDP` is ``P[s, a, s']`` with two masks: ``success`` (absorbing
states that count as success) and ``terminal`` (absorbing states where the
episode is over: the success states and the failures). The only reward is
reaching a success state; a value is a success probability.

* :func:`finite_horizon_values` -- backward induction. Returns ``(V, Q)``, in
  this order everywhere in the project: ``V[k][s]`` is the highest probability
  of success from ``s`` with ``k`` turns left, ``Q[k][s][a]`` the same after
  taking ``a`` first. ``V[0]`` and ``Q[0][s]`` are ``success[s]`` (no turn left:
  success only if already there); terminal states keep ``success[s]``.
  Acting on ``argmax Q[turns_left]`` is the budget-aware optimum.
* :func:`blind_optimum` -- the best *budget-blind* policy: it may depend on the
  state and on the turns already used, not on the budget, and maximises the
  mean success over a budget prior. Exact: reaching success on turn ``t + 1``
  is worth the prior mass of the budgets ``T >= t + 1`` (the budgets under
  which that turn still happens), so backward induction over elapsed turns
  with that time-varying reward is optimal over all such policies.
* :meth:`TabularMDP.with_errors` -- the agent error model: with probability
  ``e`` the agent takes a uniformly random *other* action. The result is again
  a :class:`TabularMDP`, so the optima above become the optima *for an agent
  that errs at rate e* (its intentions are chosen knowing it errs).
* :func:`taken_action_values` -- ``(V_e, Q)`` for grading an agent that errs
  at ``e``: ``V_e`` the optimum for that agent, ``Q[k][s][a]`` the value of
  *taking* ``a`` (no error on this step) and then continuing as that optimum.
  Its argmax is the optimum's intended action (for ``e < (A - 1) / A``).
* :func:`turns_left_success_curve` / :func:`elapsed_success_curve` -- exact
  success within ``T = 0..H`` turns of a given policy (indexed by turns left,
  or by turns used; a stationary policy is one row).
* :func:`fastest_best` -- the best action with ties broken toward the fastest
  (the best discounted value): with slack, wasting a turn ties with acting.
* :func:`discounted_values`, :func:`no_limit_success`, :func:`find_ceiling` --
  the discounted greedy policy (the oracles' stationary baseline), the success
  with no turn limit and the ceiling (smallest T reaching a share of it).

numpy is imported inside the functions (the ``envs`` extra).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from budgetmix._deps import require
from budgetmix._validate import check_between
from budgetmix.exceptions import ConfigError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    FloatArray = npt.NDArray[np.float64]
    IntArray = npt.NDArray[np.intp]
    BoolArray = npt.NDArray[np.bool_]

__all__ = [
    "BlindOptimum",
    "TabularMDP",
    "blind_optimum",
    "discounted_values",
    "elapsed_success_curve",
    "error_transitions",
    "fastest_best",
    "find_ceiling",
    "finite_horizon_values",
    "no_limit_success",
    "taken_action_values",
    "turns_left_success_curve",
]


def error_transitions(transitions: FloatArray, error_rate: float) -> FloatArray:
    """``P_e[s, a] = (1 - e) P[s, a] + e / (A - 1) * sum_{b != a} P[s, b]``: the agent error model.

    With probability ``error_rate`` the intended action ``a`` is replaced by one of
    the ``A - 1`` other actions, uniformly.

    Raises:
        ConfigError: ``error_rate`` outside ``[0, 1]``, or fewer than two actions
            with a positive rate.
    """
    check_between("error_rate", error_rate, 0, 1)
    n_actions = transitions.shape[1]
    if error_rate == 0:
        return transitions.copy()
    if n_actions < 2:
        raise ConfigError("error_rate: an error needs another action (the model has one)")
    other = error_rate / (n_actions - 1)
    total = transitions.sum(axis=1, keepdims=True)
    out: FloatArray = (1.0 - error_rate) * transitions + other * (total - transitions)
    return out


@dataclass(frozen=True, eq=False)
class TabularMDP:
    """A finite MDP whose value is the probability of reaching a success state.

    Attributes:
        transitions: ``P[s, a, s']``; every row sums to 1; terminal states loop
            onto themselves.
        success: boolean mask of the success states (absorbing).
        terminal: boolean mask of the states where the episode is over (it
            includes ``success``).
        start: the start state.

    Raises:
        ConfigError: shapes that do not agree, rows that are not distributions,
            a success state that is not terminal or a start outside the states.
        MissingExtraError: numpy is not installed.
    """

    transitions: FloatArray
    success: BoolArray
    terminal: BoolArray
    start: int = 0

    def __post_init__(self) -> None:
        require("numpy", "envs")
        import numpy as np

        p = np.asarray(self.transitions, dtype=np.float64)
        if p.ndim != 3 or p.shape[0] != p.shape[2] or p.shape[1] < 1:
            raise ConfigError(f"transitions: must have shape (S, A, S), got {p.shape}")
        n = p.shape[0]
        success = np.asarray(self.success, dtype=bool)
        terminal = np.asarray(self.terminal, dtype=bool)
        if success.shape != (n,) or terminal.shape != (n,):
            raise ConfigError(f"success/terminal: need one flag per state ({n})")
        if np.any(success & ~terminal):
            raise ConfigError("success: every success state must be terminal")
        if p.min() < 0 or not np.allclose(p.sum(axis=2), 1.0, atol=1e-9):
            raise ConfigError("transitions: every P[s, a, :] must be a distribution")
        if not 0 <= self.start < n:
            raise ConfigError(f"start: must be a state index 0..{n - 1}, got {self.start}")
        object.__setattr__(self, "transitions", p)
        object.__setattr__(self, "success", success)
        object.__setattr__(self, "terminal", terminal)

    @property
    def n_states(self) -> int:
        """Number of states."""
        return int(self.transitions.shape[0])

    @property
    def n_actions(self) -> int:
        """Number of actions."""
        return int(self.transitions.shape[1])

    def with_errors(self, error_rate: float) -> TabularMDP:
        """The same MDP for an agent that takes a random other action with ``error_rate``."""
        return TabularMDP(
            error_transitions(self.transitions, error_rate), self.success, self.terminal, self.start
        )

    def fix_terminal(self, values: FloatArray) -> None:
        """Set the terminal states' values to ``success`` (1 or 0), in place."""
        values[self.terminal] = self.success[self.terminal]


def finite_horizon_values(mdp: TabularMDP, horizon: int) -> tuple[FloatArray, FloatArray]:
    """Exact backward induction: ``(V, Q)``, shapes ``(H + 1, S)`` and ``(H + 1, S, A)``.

    See the module notes for the meaning and the boundary rows.

    Raises:
        ConfigError: ``horizon`` is negative.
    """
    import numpy as np

    if horizon < 0:
        raise ConfigError(f"horizon: must be >= 0, got {horizon}")
    n, na = mdp.n_states, mdp.n_actions
    v = np.zeros((horizon + 1, n), dtype=np.float64)
    q = np.zeros((horizon + 1, n, na), dtype=np.float64)
    v[0] = mdp.success
    q[0][mdp.success] = 1.0
    for t in range(1, horizon + 1):
        q[t] = mdp.transitions @ v[t - 1]
        q[t][mdp.terminal] = mdp.success[mdp.terminal, None]
        v[t] = q[t].max(axis=1)
    return v, q


def taken_action_values(
    mdp: TabularMDP, error_rate: float, horizon: int
) -> tuple[FloatArray, FloatArray]:
    """``(V_e, Q)``: the optimum for an agent erring at ``error_rate`` and the value of
    taking each action now, then continuing as that optimum (see the module notes).

    With ``error_rate = 0`` this is :func:`finite_horizon_values`.

    Raises:
        ConfigError: a bad ``error_rate`` or ``horizon``.
    """
    v, _ = finite_horizon_values(mdp.with_errors(error_rate), horizon)
    q = (mdp.transitions @ v[:-1].T).transpose(2, 0, 1)  # q[k - 1] = P @ V_e[k - 1]
    import numpy as np

    out = np.concatenate([np.zeros((1, *q.shape[1:])), q], axis=0)
    out[0][mdp.success] = 1.0
    out[:, mdp.terminal] = mdp.success[mdp.terminal, None]
    return v, out


def _check_table(mdp: TabularMDP, actions: Any, rows: int, what: str) -> IntArray:
    import numpy as np

    table = np.asarray(actions, dtype=np.intp)
    if table.ndim == 1:
        table = np.broadcast_to(table, (rows, table.shape[0]))
    if table.shape != (rows, mdp.n_states):
        raise ConfigError(f"{what}: needs one action id per state ({mdp.n_states}) per turn")
    if table.size and (table.min() < 0 or table.max() >= mdp.n_actions):
        raise ConfigError(f"{what}: action ids must lie in 0..{mdp.n_actions - 1}")
    return table


def turns_left_success_curve(mdp: TabularMDP, actions: Any, horizon: int) -> FloatArray:
    """Exact success from the start within ``T = 0..horizon`` turns of a policy by turns left.

    ``actions[k - 1][s]`` is the action at ``s`` with ``k`` turns left (``k = 1..horizon``);
    one row (shape ``(S,)``) is a stationary policy.

    Raises:
        ConfigError: a table of the wrong shape or with unknown action ids.
    """
    import numpy as np

    table = _check_table(mdp, actions, horizon, "actions")
    rows = np.arange(mdp.n_states)
    v = mdp.success.astype(np.float64)
    curve = np.zeros(horizon + 1, dtype=np.float64)
    curve[0] = v[mdp.start]
    for k in range(1, horizon + 1):
        v = mdp.transitions[rows, table[k - 1]] @ v
        mdp.fix_terminal(v)
        curve[k] = v[mdp.start]
    return curve


def elapsed_success_curve(mdp: TabularMDP, actions: Any, horizon: int) -> FloatArray:
    """Exact success from the start within ``T = 0..horizon`` turns of a policy by turns used.

    ``actions[t][s]`` is the action at ``s`` after ``t`` turns (``t = 0..horizon - 1``):
    a budget-blind policy that counts elapsed turns. Computed forward (the
    probability mass first entering a success state on each turn).

    Raises:
        ConfigError: a table of the wrong shape or with unknown action ids.
    """
    import numpy as np

    table = _check_table(mdp, actions, horizon, "actions")
    rows = np.arange(mdp.n_states)
    live = ~mdp.terminal
    dist = np.zeros(mdp.n_states, dtype=np.float64)
    dist[mdp.start] = 1.0
    curve = np.zeros(horizon + 1, dtype=np.float64)
    curve[0] = float(mdp.success[mdp.start])
    if mdp.terminal[mdp.start]:
        curve[:] = curve[0]
        return curve
    for t in range(horizon):
        nxt = dist @ mdp.transitions[rows, table[t]]
        curve[t + 1] = curve[t] + nxt[mdp.success].sum()
        dist = np.where(live, nxt, 0.0)
    return curve


@dataclass(frozen=True, eq=False)
class BlindOptimum:
    """The best budget-blind policy for a budget prior.

    ``actions[t][s]``: the action after ``t`` turns used (ties to the lowest id);
    ``curve[T]``: its exact success within ``T`` turns, ``T = 0..max(budgets)``;
    ``mean``: its success averaged over the prior (the maximised objective).
    """

    budgets: tuple[int, ...]
    weights: tuple[float, ...]
    actions: IntArray
    curve: FloatArray
    mean: float


def _prior(
    budgets: Sequence[int], weights: Sequence[float] | None
) -> tuple[list[int], list[float]]:
    if not budgets:
        raise ConfigError("budgets: give at least one budget")
    if any(int(b) != b or b < 1 for b in budgets):
        raise ConfigError(f"budgets: must be integers >= 1, got {list(budgets)}")
    w = [1.0] * len(budgets) if weights is None else [float(x) for x in weights]
    if len(w) != len(budgets):
        raise ConfigError("weights: give one weight per budget")
    if any(x < 0 for x in w) or sum(w) <= 0:
        raise ConfigError("weights: must be >= 0 and not all zero")
    total = sum(w)
    return [int(b) for b in budgets], [x / total for x in w]


def blind_optimum(
    mdp: TabularMDP, budgets: Sequence[int], weights: Sequence[float] | None = None
) -> BlindOptimum:
    """The exact best budget-blind policy for the prior ``budgets`` x ``weights`` (default equal).

    See the module notes. Apply :meth:`TabularMDP.with_errors` first for an agent
    that errs.

    Raises:
        ConfigError: no budgets, a budget < 1, or bad weights.
    """
    import numpy as np

    bs, ws = _prior(budgets, weights)
    top = max(bs)
    # tail[t] = prior mass of the budgets >= t (t = 0..top + 1)
    tail = np.zeros(top + 2, dtype=np.float64)
    for b, w in zip(bs, ws, strict=True):
        tail[: b + 1] += w
    actions = np.zeros((top, mdp.n_states), dtype=np.intp)
    w_next = np.zeros(mdp.n_states, dtype=np.float64)  # W_{t+1}: value after t + 1 turns used
    for t in range(top - 1, -1, -1):
        worth = np.where(mdp.terminal, np.where(mdp.success, tail[t + 1], 0.0), w_next)
        q = mdp.transitions @ worth  # (S, A)
        actions[t] = q.argmax(axis=1)
        w_next = q.max(axis=1)
    curve = elapsed_success_curve(mdp, actions, top)
    mean = float(sum(w * curve[b] for b, w in zip(bs, ws, strict=True)))
    return BlindOptimum(tuple(bs), tuple(ws), actions, curve, mean)


def discounted_values(
    mdp: TabularMDP, gamma: float = 0.999, *, tol: float = 1e-12, max_iter: int = 1_000_000
) -> tuple[FloatArray, IntArray]:
    """Infinite-horizon value iteration, success discounted by ``gamma`` per turn.

    Returns ``(V, policy)``: ``V[s] = gamma * max_a sum P[s, a, s'] V[s']`` with
    terminal states fixed at ``success``, and the greedy stationary policy on
    ``P @ V`` (ties to the lowest action id). ``gamma = 1`` gives the highest
    success probability with no turn limit.

    Raises:
        ConfigError: ``gamma`` outside ``(0, 1]``.
    """
    import numpy as np

    if not 0.0 < gamma <= 1.0:
        raise ConfigError(f"gamma: must be in (0, 1], got {gamma}")
    v = mdp.success.astype(np.float64)
    for _ in range(max_iter):
        new = gamma * (mdp.transitions @ v).max(axis=1)
        mdp.fix_terminal(new)
        delta = float(np.abs(new - v).max())
        v = new
        if delta < tol:
            break
    return v, np.argmax(mdp.transitions @ v, axis=1)


def fastest_best(q: FloatArray, q_fast: FloatArray, *, tol: float = 1e-12) -> IntArray:
    """Per row of ``q`` (actions on the last axis), the action within ``tol`` of the best
    with the highest ``q_fast`` (e.g. ``P @ V_gamma`` of :func:`discounted_values`)."""
    import numpy as np

    optimal = q >= q.max(axis=-1, keepdims=True) - tol
    best: IntArray = np.where(optimal, q_fast, -np.inf).argmax(axis=-1)
    return best


def no_limit_success(mdp: TabularMDP) -> float:
    """The highest success probability from the start with no turn limit."""
    v, _ = discounted_values(mdp, 1.0)
    return float(v[mdp.start])


def find_ceiling(
    mdp: TabularMDP, fraction: float = 0.9, *, best: float | None = None, max_turns: int = 100_000
) -> int:
    """Smallest T where the aware optimum reaches ``fraction`` of ``best`` (default: the
    no-limit success, :func:`no_limit_success`).

    Raises:
        ConfigError: ``fraction`` outside ``(0, 1]``, success unreachable, or no T up
            to ``max_turns`` qualifies.
    """
    import numpy as np

    if not 0.0 < fraction <= 1.0:
        raise ConfigError(f"fraction: must be in (0, 1], got {fraction}")
    top = no_limit_success(mdp) if best is None else best
    if top <= 0.0:
        raise ConfigError("start: the goal (a success state) cannot be reached from it")
    # A hair of slack so fraction=1 terminates despite the limit being approached geometrically.
    target = fraction * top - 1e-12
    v = mdp.success.astype(np.float64)
    for t in range(1, max_turns + 1):
        v = (mdp.transitions @ v).max(axis=1)
        mdp.fix_terminal(v)
        if v[mdp.start] >= target:
            return t
    raise ConfigError(f"max_turns: no ceiling within {max_turns} turns")
