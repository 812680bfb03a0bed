"""Exact values for ``faulty-tools-compact``: the budget-aware optimum, the budget-blind baseline.

The model (:class:`ToolsModel`) is the MDP of
:class:`~budgetmix.training.envs.faulty_tools_compact.CompactFaultyTools`: a chain
of ``hops`` lookups; the state is the number of links found ``j`` (``0..hops``;
whether the last call failed does not change any value, faults are independent).
Every tool call (``n`` look up the next link, ``a`` answer, ``g`` guess) fails
with probability ``fault_p`` (a ``tool_error``: the turn is spent, nothing
changes, the agent may retry); otherwise

* ``n`` finds link ``j + 1`` (with the chain complete there is no next key: nothing changes);
* ``a`` answers: right (success) with the chain complete, wrong (failure) before;
* ``g`` guesses: right with probability ``guess_p``; either way the episode ends.

An unparseable reply spends the turn. With ``k`` turns left (``V[0] = 0``)::

    Q[k][j][n] = (1 - f) V[k-1][j+1] + f V[k-1][j]          (j < hops; else V[k-1][j])
    Q[k][j][a] = (1 - f) + f V[k-1][hops]                    (j = hops; else f V[k-1][j])
    Q[k][j][g] = (1 - f) guess_p + f V[k-1][j]

Facts (tested): the optimum guesses exactly when the remaining lookups and the
answer do not fit in the turns left (``k <= hops - j``) and looks up otherwise,
strictly (no ties), for ``hops=3, fault_p=0.3`` and for the defaults ``hops=9,
fault_p=0.2, guess_p=0.25``; with the defaults that is, at the start, *guess* with
1-9 turns left and *look up* with 10 or more, the same 9/10 boundary as
FrozenLake's demo map (the experiment's char-level model reads the notice by its
length: it tells 9 from 10 turns left, not 4 from 9). The best budget-blind
policy (greedy on the discounted value) looks up until the chain is complete and
then answers: its success within ``T`` turns is ``P(Binomial(T, 1 - f) >= hops + 1)``.
The defaults' ceiling (90% of the no-limit success, which is 1) is 15 turns.

The model is solved on the one MDP core (:mod:`budgetmix.training.envs.mdp`,
``ToolsModel.mdp``: the link counts ``0..hops`` plus a success and a failure
state); the tables this module returns are plain lists over the link counts.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from budgetmix._validate import check_between, check_int
from budgetmix.environment import unwrap
from budgetmix.exceptions import ConfigError

if TYPE_CHECKING:
    from budgetmix.training.envs.mdp import TabularMDP

__all__ = [
    "TOOL_MOVES",
    "ToolsDemonstrator",
    "ToolsModel",
    "aware_success_curve",
    "find_ceiling",
    "finite_horizon_values",
    "guess_budgets",
    "optimal_move",
    "parse_tool_move",
    "policy_success_curve",
    "stationary_policy",
    "tools_q",
]

#: Move letters in action-id order: look up the next link, answer, guess now.
TOOL_MOVES = "nag"
_WORDS = {"next": 0, "lookup": 0, "look up": 0, "answer": 1, "guess": 2}
#: Action ids.
NEXT, ANSWER, GUESS = 0, 1, 2

#: ``table[t][j][a]``: turns left, links found, action id.
Table = list[list[list[float]]]


def parse_tool_move(text: str) -> int | None:
    """The action id of ``n`` / ``a`` / ``g`` (or ``next``/``lookup``, ``answer``, ``guess``)."""
    stripped = text.strip().lower()
    if len(stripped) == 1:
        idx = TOOL_MOVES.find(stripped)
        return idx if idx >= 0 else None
    return _WORDS.get(stripped)


@dataclass(frozen=True, slots=True)
class ToolsModel:
    """The MDP of a faulty lookup chain (see the module notes).

    Raises:
        ConfigError: ``hops`` < 1, ``fault_p`` outside ``[0, 1)`` or ``guess_p``
            outside ``[0, 1]``; the message names the field.
    """

    hops: int = 9
    fault_p: float = 0.2
    guess_p: float = 0.25

    def __post_init__(self) -> None:
        check_int("ToolsModel.hops", self.hops, minimum=1, maximum=25)
        check_between("ToolsModel.fault_p", self.fault_p, 0, 1)
        if self.fault_p >= 1:
            raise ConfigError(f"ToolsModel.fault_p: must be below 1, got {self.fault_p}")
        check_between("ToolsModel.guess_p", self.guess_p, 0, 1)

    @property
    def n_states(self) -> int:
        """Links found: ``0..hops``."""
        return self.hops + 1

    @property
    def mdp(self) -> TabularMDP:
        """The model on the MDP core: states ``0..hops`` (links), ``hops + 1`` success,
        ``hops + 2`` failure; actions in :data:`TOOL_MOVES` order."""
        return _tools_mdp(self)


@functools.lru_cache(maxsize=64)
def _tools_mdp(model: ToolsModel) -> TabularMDP:
    import numpy as np
    from budgetmix.training.envs.mdp import TabularMDP

    f, g, h = model.fault_p, model.guess_p, model.hops
    won, lost = h + 1, h + 2
    p = np.zeros((h + 3, len(TOOL_MOVES), h + 3), dtype=np.float64)
    for j in range(h + 1):
        p[j, :, j] = f  # every call can fail: nothing changes
        p[j, NEXT, min(j + 1, h)] += 1 - f
        p[j, ANSWER, won if j == h else lost] += 1 - f
        p[j, GUESS, won] += (1 - f) * g
        p[j, GUESS, lost] += (1 - f) * (1 - g)
    for end in (won, lost):
        p[end, :, end] = 1.0
    done = np.zeros(h + 3, dtype=bool)
    done[[won, lost]] = True
    return TabularMDP(p, np.arange(h + 3) == won, done, 0)


def finite_horizon_values(model: ToolsModel, horizon: int) -> tuple[list[list[float]], Table]:
    """Exact finite-horizon value iteration: ``(V, Q)`` (the core's order).

    ``V[t][j]`` is the highest success probability with ``t`` turns left and ``j``
    links found; ``Q[t][j][a]`` the same after taking action ``a`` first
    (``Q[0]`` and ``V[0]`` are zero: no turn, no answer).

    Raises:
        ConfigError: ``horizon`` is negative.
    """
    from budgetmix.training.envs.mdp import finite_horizon_values as solve

    v, q = solve(model.mdp, horizon)
    n = model.n_states
    return v[:, :n].tolist(), q[:, :n, :].tolist()


def optimal_move(q_row: Sequence[float], *, tol: float = 1e-12) -> int:
    """The best action id of one ``Q[t][j]`` row; ties go to the move that ends soonest
    (guess, then answer, then look up), as FrozenLake's oracle breaks ties by speed."""
    best = max(q_row)
    for a in (GUESS, ANSWER, NEXT):
        if q_row[a] >= best - tol:
            return a
    raise AssertionError("unreachable")  # pragma: no cover


def aware_success_curve(model: ToolsModel, horizon: int) -> list[float]:
    """Success of the budget-aware optimum from the start, for T = 0..horizon."""
    return [row[0] for row in finite_horizon_values(model, horizon)[0]]


def stationary_policy(model: ToolsModel, gamma: float = 0.99, *, tol: float = 1e-12) -> list[int]:
    """The best budget-blind policy: one action per link count, greedy on the
    ``gamma``-discounted value (reward 1 for a right answer, ``guess_p`` for a guess).

    Raises:
        ConfigError: ``gamma`` outside ``(0, 1)``.
    """
    from budgetmix.training.envs.mdp import discounted_values

    if not 0.0 < gamma < 1.0:
        raise ConfigError(f"gamma: must be in (0, 1), got {gamma}")
    policy = discounted_values(model.mdp, gamma, tol=tol, max_iter=100_000)[1]
    return [int(a) for a in policy[: model.n_states]]


def policy_success_curve(model: ToolsModel, policy: Sequence[int], horizon: int) -> list[float]:
    """Exact success of a stationary ``policy`` (one action id per link count) from the start,
    for T = 0..horizon.

    Raises:
        ConfigError: ``policy`` does not have one action id in ``0..2`` per link count.
    """
    if len(policy) != model.n_states or any(a not in (0, 1, 2) for a in policy):
        raise ConfigError(f"policy: needs one action id in 0..2 per link count ({model.n_states})")
    from budgetmix.training.envs.mdp import turns_left_success_curve

    full = [*policy, NEXT, NEXT]  # the success and failure states: any action
    return [float(x) for x in turns_left_success_curve(model.mdp, full, horizon)]


def find_ceiling(model: ToolsModel, fraction: float = 0.9, *, max_turns: int = 10_000) -> int:
    """Smallest T where the aware optimum reaches ``fraction`` of its no-limit success (1:
    with ``fault_p < 1`` every call goes through eventually).

    Raises:
        ConfigError: ``fraction`` outside ``(0, 1]`` or no T up to ``max_turns`` qualifies.
    """
    from budgetmix.training.envs.mdp import find_ceiling as ceiling

    return ceiling(model.mdp, fraction, best=1.0, max_turns=max_turns)


def guess_budgets(model: ToolsModel, horizon: int, *, tol: float = 1e-12) -> tuple[int, ...]:
    """The turns-left values ``1..horizon`` at which guessing is strictly best at the start."""
    q = finite_horizon_values(model, horizon)[1]
    return tuple(
        k
        for k in range(1, horizon + 1)
        if all(q[k][0][GUESS] > q[k][0][a] + tol for a in (NEXT, ANSWER))
    )


def tools_q(
    model: ToolsModel,
    *,
    parse: Callable[[str], int | None] = parse_tool_move,
    error_rate: float = 0.0,
) -> Callable[[Any, str], float]:
    """Exact ``Q[turns_remaining][links][action]`` as a diagnostics Q-function.

    ``point.state`` is the environment's ``(links, last_call_failed)``; an
    unparseable action spends the turn, so its value is ``V[turns_remaining - 1][links]``.
    ``error_rate`` grades against the optimum for an agent erring at that rate
    (taking the move, then playing that optimum); 0, the default, is the noiseless one.

    Raises:
        ConfigError: ``error_rate`` outside ``[0, 1]``.
    """
    from budgetmix.training.envs.mdp import taken_action_values

    check_between("error_rate", error_rate, 0, 1)
    tables: dict[str, Any] = {}

    def q(point: Any, action: str) -> float:
        k = int(point.turns_remaining)
        if "q" not in tables or len(tables["q"]) <= k:
            if error_rate:
                v, table = taken_action_values(model.mdp, error_rate, max(k, 64))
                tables["v"], tables["q"] = v.tolist(), table.tolist()
            else:
                tables["v"], tables["q"] = finite_horizon_values(model, max(k, 64))
        links = int(point.state[0])
        move = parse(action)
        if move is None:
            return float(tables["v"][k - 1][links])
        return float(tables["q"][k][links][move])

    return q


class ToolsDemonstrator:
    """The optimal move (budget-aware, or the stationary blind policy), replaced by a random
    other move at ``error_rate``: the SFT demonstrator of ``faulty-tools-compact``.

    Called as the trainer's demo-agent hook (``demonstrator(request)``: ``request.env``
    is the live environment, ``request.state`` its ledger state) or through
    :meth:`move`. ``seed`` seeds the error draws.

    Raises:
        ConfigError: ``error_rate`` outside ``[0, 1]``, or (when called) an
            environment without a :class:`ToolsModel` ``model`` and a ``state``.
    """

    def __init__(
        self, error_rate: float, seed: int | str, *, budget_blind: bool = False, gamma: float = 0.99
    ) -> None:
        check_between("error_rate", error_rate, 0, 1)
        self.error_rate = error_rate
        self.budget_blind = budget_blind
        self.gamma = gamma
        self.rng = random.Random(seed)
        self._tables: dict[ToolsModel, tuple[Table, list[int]]] = {}

    def best(self, model: ToolsModel, links: int, turns_remaining: int) -> int:
        """The noise-free action id: ``argmax Q[turns_remaining][links]`` (ties to the
        soonest end), or the stationary policy's when budget-blind."""
        tables = self._tables.get(model)
        if tables is None or len(tables[0]) <= turns_remaining:
            q = finite_horizon_values(model, max(turns_remaining, 64))[1]
            tables = self._tables[model] = (q, stationary_policy(model, self.gamma))
        if self.budget_blind:
            return tables[1][links]
        return optimal_move(tables[0][max(1, turns_remaining)][links])

    def move(self, model: ToolsModel, links: int, turns_remaining: int) -> str:
        """The (possibly wrong) move letter."""
        best = self.best(model, links, turns_remaining)
        if self.error_rate and self.rng.random() < self.error_rate:
            best = self.rng.choice([a for a in range(len(TOOL_MOVES)) if a != best])
        return TOOL_MOVES[best]

    def __call__(self, request: Any) -> str:
        """The move for the live environment of ``request`` and the turns its ledger has left."""
        inner = unwrap(request.env)
        model, state = getattr(inner, "model", None), getattr(inner, "state", None)
        if not isinstance(model, ToolsModel) or not isinstance(state, tuple):
            raise ConfigError(
                f"env: ToolsDemonstrator needs faulty-tools-compact, got {request.env.name!r}"
            )
        return self.move(model, int(state[0]), request.state.turns_remaining)
