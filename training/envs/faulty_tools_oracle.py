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

Pure Python: the state space is ``hops + 1`` links.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from budgetmix._validate import check_between, check_int
from budgetmix.environment import unwrap
from budgetmix.exceptions import ConfigError

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

    def action_values(self, j: int, v: Sequence[float]) -> list[float]:
        """``Q[j][a]`` for each action id, given the values ``v`` of the next turn."""
        f, h = self.fault_p, self.hops
        stay = f * v[j]
        look = (1 - f) * v[j + 1] + stay if j < h else v[j]
        answer = (1 - f) + stay if j == h else stay
        return [look, answer, (1 - f) * self.guess_p + stay]


def finite_horizon_values(model: ToolsModel, horizon: int) -> tuple[Table, list[list[float]]]:
    """Exact finite-horizon value iteration: ``(Q, V)``.

    ``V[t][j]`` is the highest success probability with ``t`` turns left and ``j``
    links found; ``Q[t][j][a]`` the same after taking action ``a`` first
    (``Q[0]`` and ``V[0]`` are zero: no turn, no answer).

    Raises:
        ConfigError: ``horizon`` is negative.
    """
    if horizon < 0:
        raise ConfigError(f"horizon: must be >= 0, got {horizon}")
    v: list[list[float]] = [[0.0] * model.n_states]
    q: Table = [[[0.0] * len(TOOL_MOVES) for _ in range(model.n_states)]]
    for _ in range(horizon):
        row = [model.action_values(j, v[-1]) for j in range(model.n_states)]
        q.append(row)
        v.append([max(r) for r in row])
    return q, v


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
    return [row[0] for row in finite_horizon_values(model, horizon)[1]]


def stationary_policy(model: ToolsModel, gamma: float = 0.99, *, tol: float = 1e-12) -> list[int]:
    """The best budget-blind policy: one action per link count, greedy on the
    ``gamma``-discounted value (reward 1 for a right answer, ``guess_p`` for a guess).

    Raises:
        ConfigError: ``gamma`` outside ``(0, 1)``.
    """
    if not 0.0 < gamma < 1.0:
        raise ConfigError(f"gamma: must be in (0, 1), got {gamma}")
    v = [0.0] * model.n_states
    rows: list[list[float]] = []
    for _ in range(100_000):
        rows = [_discounted_row(model, j, v, gamma) for j in range(model.n_states)]
        new = [max(r) for r in rows]
        delta = max(abs(a - b) for a, b in zip(new, v, strict=True))
        v = new
        if delta < tol:
            break
    return [_first_best(r) for r in rows]


def _first_best(row: Sequence[float]) -> int:
    """The lowest action id with the highest value."""
    return max(range(len(row)), key=lambda a: (row[a], -a))


def _discounted_row(model: ToolsModel, j: int, v: Sequence[float], gamma: float) -> list[float]:
    f, h = model.fault_p, model.hops
    stay = f * gamma * v[j]
    look = gamma * ((1 - f) * v[j + 1] + f * v[j]) if j < h else gamma * v[j]
    answer = (1 - f) + stay if j == h else stay
    return [look, answer, (1 - f) * model.guess_p + stay]


def policy_success_curve(model: ToolsModel, policy: Sequence[int], horizon: int) -> list[float]:
    """Exact success of a stationary ``policy`` (one action id per link count) from the start,
    for T = 0..horizon.

    Raises:
        ConfigError: ``policy`` does not have one action id in ``0..2`` per link count.
    """
    if len(policy) != model.n_states or any(a not in (0, 1, 2) for a in policy):
        raise ConfigError(f"policy: needs one action id in 0..2 per link count ({model.n_states})")
    v = [0.0] * model.n_states
    curve = [0.0]
    for _ in range(horizon):
        v = [model.action_values(j, v)[policy[j]] for j in range(model.n_states)]
        curve.append(v[0])
    return curve


def find_ceiling(model: ToolsModel, fraction: float = 0.9, *, max_turns: int = 10_000) -> int:
    """Smallest T where the aware optimum reaches ``fraction`` of its no-limit success (1:
    with ``fault_p < 1`` every call goes through eventually).

    Raises:
        ConfigError: ``fraction`` outside ``(0, 1]`` or no T up to ``max_turns`` qualifies.
    """
    if not 0.0 < fraction <= 1.0:
        raise ConfigError(f"fraction: must be in (0, 1], got {fraction}")
    v = [0.0] * model.n_states
    for t in range(1, max_turns + 1):
        v = [max(model.action_values(j, v)) for j in range(model.n_states)]
        if v[0] >= fraction - 1e-12:
            return t
    raise ConfigError(f"max_turns: no ceiling within {max_turns} turns")


def guess_budgets(model: ToolsModel, horizon: int, *, tol: float = 1e-12) -> tuple[int, ...]:
    """The turns-left values ``1..horizon`` at which guessing is strictly best at the start."""
    q = finite_horizon_values(model, horizon)[0]
    return tuple(
        k
        for k in range(1, horizon + 1)
        if all(q[k][0][GUESS] > q[k][0][a] + tol for a in (NEXT, ANSWER))
    )


def tools_q(
    model: ToolsModel, *, parse: Callable[[str], int | None] = parse_tool_move
) -> Callable[[Any, str], float]:
    """Exact ``Q[turns_remaining][links][action]`` as a diagnostics Q-function.

    ``point.state`` is the environment's ``(links, last_call_failed)``; an
    unparseable action spends the turn, so its value is ``V[turns_remaining - 1][links]``.
    """
    tables: dict[str, Any] = {}

    def q(point: Any, action: str) -> float:
        k = int(point.turns_remaining)
        if "q" not in tables or len(tables["q"]) <= k:
            tables["q"], tables["v"] = finite_horizon_values(model, max(k, 64))
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
            q = finite_horizon_values(model, max(turns_remaining, 64))[0]
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
