"""The paper's diagnostics as library functions: step-level action quality, budget curves, recovery.

Policies are batched callables ``policy(points) -> actions``: one action text per
:class:`DecisionPoint` (the state, the turns left, and the exact chat an LM would
see, notices included). :func:`pointwise` lifts a one-point function.

* :func:`run_episodes` plays tasks under a turn budget (a real
  :class:`~budgetmix.ledger.Ledger`, notices rendered by the SDK's renderer exactly
  as in training rollouts) and records every decision point.
* :func:`compare_actions` -- from the *same* decision points, which of two
  policies picks the better action, by a Q-function: exact finite-horizon values
  for FrozenLake (:func:`frozenlake_q`) or Monte Carlo
  (:func:`budgetmix.training.diagnostics.monte_carlo.monte_carlo_q`).
  Reported overall and restricted to points right after a mistake (the paper:
  RL better in ~43% of FrozenLake states overall, ~66% right after a mistake).
* :func:`success_curve` -- success vs turn budget T with Wilson intervals
  (budget extrapolation: a policy trained at one T, evaluated shorter and longer).
* recovery (:mod:`budgetmix.training.diagnostics.recovery_injection`) -- force a mistake at turn
  ``s`` and measure how often the policy still succeeds within the remaining budget.

A *mistake* is, when a Q-function is given, an action that loses more than
``mistake_tol`` success probability against the best action (environment labels
do not count then: bumping into a wall is sometimes the optimal wait); without
one, a step the environment labels as one. Step-level comparisons by expected Q
with a noise floor: :mod:`budgetmix.training.diagnostics.action_quality`; budget
sensitivity: :mod:`budgetmix.training.diagnostics.budget_sensitivity`. Imports nothing heavy.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from budgetmix.environment import Environment, Task, unwrap
from budgetmix.evaluation.passk import wilson_interval
from budgetmix.exceptions import ConfigError
from budgetmix.ledger import fixed_clock_ledger
from budgetmix.progress import ProgressLine
from budgetmix.training.envs.agents import FrozenLakeDemonstrator
from budgetmix.training.envs.frozenlake_compact import parse_move
from budgetmix.training.envs.frozenlake_oracle import (
    ACTIONS,
    FrozenLakeModel,
    finite_horizon_values,
)
from budgetmix.training.rollouts.chat import environment_message

__all__ = [
    "ActionComparison",
    "CurvePoint",
    "DecisionPoint",
    "EpisodeTrace",
    "LiveEpisode",
    "Policy",
    "QFunction",
    "compare_actions",
    "frozenlake_oracle_policy",
    "frozenlake_q",
    "invalid_reply",
    "pointwise",
    "run_episodes",
    "slipping",
    "success_curve",
    "worst_action",
]


@dataclass(frozen=True, slots=True)
class DecisionPoint:
    """One state where a policy must act.

    ``turn`` is 1-based; ``turns_remaining`` counts this turn. ``messages`` is the
    chat so far (system instructions, then user/assistant turns, ending with the
    user message that carries this turn's observation and notice). ``actions``
    are the earlier action texts (for replay); ``after_mistake`` says whether the
    previous step was a mistake.
    """

    task_id: str
    seed: int
    turn: int
    turns_total: int
    turns_remaining: int
    state: Hashable
    observation: str
    messages: tuple[Mapping[str, str], ...] = field(repr=False)
    actions: tuple[str, ...] = ()
    after_mistake: bool = False


@dataclass(frozen=True, slots=True)
class EpisodeTrace:
    """One played episode: its decision points and outcome."""

    task_id: str
    seed: int
    budget: int
    points: tuple[DecisionPoint, ...]
    actions: tuple[str, ...]
    mistakes: tuple[bool, ...]
    success: bool
    termination: str


#: Batched policy: one action text per decision point, in order.
Policy = Callable[[Sequence[DecisionPoint]], Sequence[str]]
#: Success probability of taking ``action`` at ``point`` and then acting well (or as a
#: continuation policy does) for the remaining turns.
QFunction = Callable[[DecisionPoint, str], float]
#: Reads a hashable state snapshot from a live environment.
Snapshot = Callable[[Environment], Hashable]


def pointwise(fn: Callable[[DecisionPoint], str]) -> Policy:
    """A batched policy from a one-point function."""

    def policy(points: Sequence[DecisionPoint]) -> list[str]:
        return [fn(p) for p in points]

    return policy


def slipping(policy: Policy, rate: float, moves: Sequence[str], seed: int) -> Policy:
    """``policy`` that, with probability ``rate`` per decision, takes a uniformly random
    *other* move of ``moves`` instead (the agent's error model; draws from ``seed``).

    Raises:
        ConfigError: ``rate`` outside [0, 1] or fewer than two moves.
    """
    import random

    if not 0.0 <= rate <= 1.0:
        raise ConfigError(f"rate: must be in [0, 1], got {rate}")
    if len(moves) < 2:
        raise ConfigError("moves: need at least two moves to slip to another")
    rng = random.Random(seed)

    def slipped(points: Sequence[DecisionPoint]) -> list[str]:
        out = []
        for action in policy(points):
            if rng.random() < rate:
                action = rng.choice([m for m in moves if m != action.strip()])
            out.append(action)
        return out

    return slipped


def default_snapshot(env: Environment) -> Hashable:
    """``state`` of the innermost environment (FrozenLake's cell), or ``None``."""
    state: Hashable = getattr(unwrap(env), "state", None)
    return state


class LiveEpisode:
    """An episode in progress: environment, ledger, chat, history (what run_episodes steps)."""

    def __init__(self, task: Task, budget: int, fmt: str, snapshot: Snapshot) -> None:
        self.task, self.budget, self.fmt, self.snapshot = task, budget, fmt, snapshot
        self.env = task.make_env()
        self.ledger = fixed_clock_ledger(budget)
        observation = self.env.reset(task.seed)
        self.ledger.try_charge_turn()
        self.messages: list[Mapping[str, str]] = [
            {"role": "system", "content": self.env.instructions()}
        ]
        self.observation = observation
        self._push_user(observation)
        self.actions: list[str] = []
        self.mistakes: list[bool] = []
        self.points: list[DecisionPoint] = []
        self.termination: str | None = None
        self.success = False

    def _push_user(self, observation: str) -> None:
        state = self.ledger.state(in_turn=True)
        self.messages.append(
            {"role": "user", "content": environment_message(observation, state, self.fmt)}
        )

    def point(self) -> DecisionPoint:
        """Record the decision the policy faces now (state, turns left, history)."""
        state = self.ledger.state(in_turn=True)
        p = DecisionPoint(
            task_id=self.task.task_id,
            seed=self.task.seed,
            turn=state.turn_number,
            turns_total=self.budget,
            turns_remaining=state.turns_remaining,
            state=self.snapshot(self.env),
            observation=self.observation,
            messages=tuple(self.messages),
            actions=tuple(self.actions),
            after_mistake=bool(self.mistakes and self.mistakes[-1]),
        )
        self.points.append(p)
        return p

    def apply(
        self,
        point: DecisionPoint,
        action: str,
        q: QFunction | None,
        tol: float,
        moves: Sequence[str] = ACTIONS,
    ) -> None:
        """Take ``action`` at ``point``: a mistake when it loses more than ``tol`` in ``q``
        against the best of ``moves`` (without ``q``: when the environment labels it one);
        then end or charge the next turn."""
        result = self.env.step(action)
        label = result.label
        if q is not None:  # a mistake is a loss in Q (waiting into a wall can be optimal)
            mistake = _loss(q, point, action, moves) > tol
        else:
            mistake = not label.valid or label.mistake is not None
        self.actions.append(action)
        self.mistakes.append(mistake)
        self.messages.append({"role": "assistant", "content": action})
        self.observation = result.observation
        if result.done:
            self.success = result.success
            self.termination = "success" if result.success else "failure"
        elif self.ledger.try_charge_turn() is not None:
            self.termination = "budget_exhausted"
        else:
            self._push_user(result.observation)

    def trace(self) -> EpisodeTrace:
        """The finished episode as an :class:`EpisodeTrace`."""
        return EpisodeTrace(
            task_id=self.task.task_id,
            seed=self.task.seed,
            budget=self.budget,
            points=tuple(self.points),
            actions=tuple(self.actions),
            mistakes=tuple(self.mistakes),
            success=self.success,
            termination=self.termination or "budget_exhausted",
        )


def _loss(q: QFunction, point: DecisionPoint, action: str, moves: Sequence[str] = ACTIONS) -> float:
    """How much success probability ``action`` loses against the best of ``moves``."""
    best = max(q(point, a) for a in moves)
    return best - q(point, action)


def run_episodes(
    tasks: Sequence[Task],
    policy: Policy,
    budget: int | Sequence[int],
    *,
    notice_format: str = "v1-compact",
    snapshot: Snapshot = default_snapshot,
    q: QFunction | None = None,
    mistake_tol: float = 0.01,
    moves: Sequence[str] = ACTIONS,
    force: Mapping[int, Callable[[DecisionPoint], str]] | None = None,
    progress: ProgressLine | None = None,
) -> list[EpisodeTrace]:
    """Play every task once under ``budget`` turns, all episodes stepped together.

    ``budget`` is one turn limit for all tasks or one per task (a whole
    Pass@(K,T) grid then runs as one batch).
    ``force`` maps a 1-based turn to a function whose action replaces the
    policy's at that turn (mistake injection). The mistake test against ``q``
    compares with the best of ``moves`` (default :data:`ACTIONS`, FrozenLake's moves).
    ``progress`` advances by one step per finished episode.

    Raises:
        ConfigError: a budget < 1, one budget per task expected, or the policy
            returns the wrong number of actions.
    """
    budgets = [budget] * len(tasks) if isinstance(budget, int) else list(budget)
    if len(budgets) != len(tasks):
        raise ConfigError("budget: give one budget, or one per task")
    if any(b < 1 for b in budgets):
        raise ConfigError(f"budget: must be >= 1, got {min(budgets)}")
    live = [LiveEpisode(t, b, notice_format, snapshot) for t, b in zip(tasks, budgets, strict=True)]
    forced = dict(force or {})
    while active := [ep for ep in live if ep.termination is None]:
        points = [ep.point() for ep in active]
        actions = list(policy(points))
        if len(actions) != len(points):
            raise ConfigError("policy: must return one action per decision point")
        for ep, p, action in zip(active, points, actions, strict=True):
            chosen = forced[p.turn](p) if p.turn in forced else action
            ep.apply(p, chosen, q, mistake_tol, moves)
        if progress is not None:
            progress.advance(sum(ep.termination is not None for ep in active))
    return [ep.trace() for ep in live]


# -- Q-functions ---------------------------------------------------------------------------
def frozenlake_q(
    model: FrozenLakeModel,
    *,
    parse: Callable[[str], int | None] = parse_move,
    error_rate: float = 0.0,
) -> QFunction:
    """Exact ``Q[turns_remaining][cell][action]`` from finite-horizon value iteration.

    ``error_rate`` grades against the optimum *for an agent that errs at that rate*
    (a random other move): ``Q`` is the success of taking the move, then playing
    that optimum (:func:`~budgetmix.training.envs.mdp.taken_action_values`); the
    default 0 is the noiseless optimum (the published figures). An unparseable
    action leaves the agent in place and uses the turn, so its value is
    ``V[turns_remaining - 1][cell]``. ``point.state`` must be the cell index.

    Raises:
        ConfigError: ``error_rate`` outside ``[0, 1]``.
    """
    from budgetmix._validate import check_between
    from budgetmix.training.envs.mdp import taken_action_values

    check_between("error_rate", error_rate, 0, 1)
    tables: dict[str, Any] = {}

    def q(point: DecisionPoint, action: str) -> float:
        k = point.turns_remaining
        if "q" not in tables or tables["q"].shape[0] <= k:
            if error_rate:
                tables["v"], tables["q"] = taken_action_values(model.mdp, error_rate, max(k, 64))
            else:
                tables["v"], tables["q"] = finite_horizon_values(model, max(k, 64))
        cell = int(point.state)  # type: ignore[call-overload]
        move = parse(action)
        if move is None:
            return float(tables["v"][k - 1][cell])
        return float(tables["q"][k][cell][move])

    return q


# -- policies and forced mistakes --------------------------------------------------------
def frozenlake_oracle_policy(
    model: FrozenLakeModel,
    *,
    budget_blind: bool = False,
    moves: Sequence[str] = ACTIONS,
    gamma: float = 0.999,
    noise: float = 0.0,
    seed: int = 0,
) -> Policy:
    """The exact optimum as a policy (``argmax Q[turns_remaining]``, ties to the fastest move).

    ``budget_blind`` acts on the ``gamma``-discounted stationary policy instead.
    ``noise`` replaces the move by a random other one with that probability (the
    noisy demonstrator); ``moves`` are the texts of action ids 0..3. It is
    :class:`~budgetmix.training.envs.agents.FrozenLakeDemonstrator` on ``model``'s map.
    """
    demo = FrozenLakeDemonstrator(
        noise, f"oracle:{seed}", budget_blind=budget_blind, gamma=gamma, moves=moves
    )

    def one(point: DecisionPoint) -> str:
        cell = int(point.state)  # type: ignore[call-overload]
        return demo.move(model, cell, point.turns_remaining)

    return pointwise(one)


def worst_action(q: QFunction, moves: Sequence[str] = ACTIONS) -> Callable[[DecisionPoint], str]:
    """A forced mistake: the move with the lowest Q (ties to the first)."""

    def force(point: DecisionPoint) -> str:
        return min(moves, key=lambda a: q(point, a))

    return force


def invalid_reply(text: str = "???") -> Callable[[DecisionPoint], str]:
    """A forced mistake: an unparseable reply (the turn is spent, nothing moves)."""
    return lambda point: text


# -- analyses ----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ActionComparison:
    """Shares of decision points where A's action is better, tied or worse than B's (by Q).

    ``*_after_mistake`` restrict to points right after a mistake; shares are
    ``None`` when there is no such point.
    """

    n: int
    a_better: float | None
    tie: float | None
    b_better: float | None
    n_after_mistake: int
    a_better_after_mistake: float | None
    tie_after_mistake: float | None
    b_better_after_mistake: float | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {k: getattr(self, k) for k in self.__slots__}


def _shares(outcomes: Sequence[int]) -> tuple[float | None, float | None, float | None]:
    if not outcomes:
        return None, None, None
    n = len(outcomes)
    return (
        sum(o > 0 for o in outcomes) / n,
        sum(o == 0 for o in outcomes) / n,
        sum(o < 0 for o in outcomes) / n,
    )


def compare_actions(
    points: Sequence[DecisionPoint],
    policy_a: Policy,
    policy_b: Policy,
    q: QFunction,
    *,
    tol: float = 1e-6,
) -> ActionComparison:
    """From the same decision points, is A's action better than B's?

    Q differences within ``tol`` count as ties. Each policy is asked once per point
    (a sampling policy contributes one sample per point).
    """
    acts_a, acts_b = list(policy_a(points)), list(policy_b(points))
    outcomes: list[int] = []
    for p, a, b in zip(points, acts_a, acts_b, strict=True):
        diff = q(p, a) - q(p, b)
        outcomes.append(0 if abs(diff) <= tol else (1 if diff > 0 else -1))
    after = [o for o, p in zip(outcomes, points, strict=True) if p.after_mistake]
    overall, post = _shares(outcomes), _shares(after)
    return ActionComparison(len(outcomes), *overall, len(after), *post)


@dataclass(frozen=True, slots=True)
class CurvePoint:
    """Success at one turn budget, with a 95% Wilson interval."""

    budget: int
    successes: int
    episodes: int
    rate: float
    low: float
    high: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {k: getattr(self, k) for k in self.__slots__}


def _curve_point(budget: int, wins: int, n: int) -> CurvePoint:
    low, high = wilson_interval(wins, n) if n else (0.0, 1.0)
    return CurvePoint(budget, wins, n, wins / n if n else 0.0, low, high)


def success_curve(
    tasks: Sequence[Task],
    policy: Policy,
    budgets: Sequence[int],
    *,
    notice_format: str = "v1-compact",
    progress: ProgressLine | None = None,
) -> list[CurvePoint]:
    """Success rate of ``policy`` at each budget (one episode per task and budget)."""
    out = []
    for t in budgets:
        traces = run_episodes(tasks, policy, t, notice_format=notice_format, progress=progress)
        out.append(_curve_point(t, sum(tr.success for tr in traces), len(traces)))
    return out
