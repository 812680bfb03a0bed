"""The exact model of ``fault-chain-compact``: a lookup chain where mistakes need a repair.

:class:`ChainModel` is the MDP of
:class:`~budgetmix.training.envs.fault_chain_compact.CompactFaultChain` on the MDP
core (:mod:`budgetmix.training.envs.mdp`). The state is ``(links, mode)``:
``links`` found ``0..hops`` and the mode ``OK``, ``HELD`` (a guessed value in
hand; only before the chain is complete) or ``BROKEN`` (a malformed call broke
the chain: only a repair helps). Moves, in action-id order (:data:`CHAIN_MOVES`):

* ``n`` look up the next link: an injected tool fault with probability
  ``fault_p`` (the turn is spent, nothing changes, retry), else link ``+1``
  (a held guess is dropped); with the chain complete there is no next key: a
  malformed call;
* ``r`` repair: ``BROKEN`` -> ``OK``; drops a held guess; otherwise a no-op;
* ``a`` answer with what is in hand: the end of a complete chain is right
  (success); a held guess is right with probability ``guess_p``, else wrong
  (failure); a pointer of an incomplete chain is no answer: a malformed call;
* ``g`` fetch a guess (``OK`` -> ``HELD``); on a complete chain a malformed call.

A malformed call puts the chain in ``BROKEN``; while broken, ``n``/``a``/``g`` are
refused (the turn is spent). The only terminal moves are ``a`` on a complete
chain and ``a`` with a guess in hand, so a single mistake never ends an episode:
there are no accidental answers, and a guess takes two deliberate moves
(``g`` then ``a``). An unparseable reply is a malformed call too.

The ceiling is computed at the agent's error rate (:func:`chain_ceiling`: the
smallest T where the optimum *for that agent* reaches 90% of its no-limit
success), so the budgets are fractions of what that agent needs. The defaults
(6 links, ``fault_p`` 0.2, ``guess_p`` 0.3) give a VoI of 26.1 / 16.3 / 4.2 / 2.6
points at 25 / 50 / 75 / 100% for ``e = 0.2`` and 24.3 / 11.2 / 2.4 / 1.7 for
``e = 0.3`` (tested; ``budgetmix voi --env fault-chain-compact``).
:func:`repair_headroom` is what recovery is worth: the optimum's success minus
its success were a broken chain final (as a malformed call is in
``faulty-tools-compact``).
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from budgetmix._validate import check_between, check_choice, check_int
from budgetmix.environment import unwrap
from budgetmix.exceptions import ConfigError
from budgetmix.training.envs.demo import DemoReply

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    from budgetmix.training.envs.mdp import TabularMDP

__all__ = [
    "BROKEN",
    "CHAIN_DEMO_OPTIONS",
    "CHAIN_MOVES",
    "DEMO_LABELS",
    "HELD",
    "OK",
    "ChainDemonstrator",
    "ChainModel",
    "chain_ceiling",
    "chain_demo",
    "chain_q",
    "parse_chain_move",
    "repair_headroom",
]

#: Move letters in action-id order: look up, repair, answer, guess.
CHAIN_MOVES = "nrag"
LOOKUP, REPAIR, ANSWER, GUESS = 0, 1, 2, 3
#: Modes of the chain.
OK, HELD, BROKEN = 0, 1, 2
_WORDS = {"next": 0, "lookup": 0, "look up": 0, "repair": 1, "answer": 2, "guess": 3}


def parse_chain_move(text: str) -> int | None:
    """The action id of ``n`` / ``r`` / ``a`` / ``g`` (or the words); else ``None``."""
    stripped = text.strip().lower()
    if len(stripped) == 1:
        idx = CHAIN_MOVES.find(stripped)
        return idx if idx >= 0 else None
    return _WORDS.get(stripped)


@dataclass(frozen=True, slots=True)
class ChainModel:
    """The MDP of a faulty lookup chain with repairs (see the module notes).

    Raises:
        ConfigError: ``hops`` outside ``1..25``, ``fault_p`` outside ``[0, 1)`` or
            ``guess_p`` outside ``[0, 1]``; the message names the field.
    """

    hops: int = 6
    fault_p: float = 0.2
    guess_p: float = 0.3

    def __post_init__(self) -> None:
        check_int("ChainModel.hops", self.hops, minimum=1, maximum=25)
        check_between("ChainModel.fault_p", self.fault_p, 0, 1)
        if self.fault_p >= 1:
            raise ConfigError(f"ChainModel.fault_p: must be below 1, got {self.fault_p}")
        check_between("ChainModel.guess_p", self.guess_p, 0, 1)

    def index(self, links: int, mode: int) -> int:
        """The MDP state of ``(links, mode)``."""
        return 3 * links + mode

    @property
    def won(self) -> int:
        """The success state."""
        return 3 * (self.hops + 1)

    @property
    def mdp(self) -> TabularMDP:
        """The model on the MDP core (actions in :data:`CHAIN_MOVES` order)."""
        return _chain_mdp(self)


def _fill(model: ChainModel, p: npt.NDArray[np.float64], j: int) -> None:
    f, g, h = model.fault_p, model.guess_p, model.hops
    ok, held, broken = (model.index(j, m) for m in (OK, HELD, BROKEN))
    won, lost = model.won, model.won + 1
    for st in (ok, held):
        if j < h:
            p[st, LOOKUP, model.index(j + 1, OK)] += 1 - f
            p[st, LOOKUP, st] += f
        else:
            p[st, LOOKUP, broken] += 1  # no next key
        p[st, REPAIR, ok] += 1
    if j < h:
        p[ok, ANSWER, broken] += 1  # a pointer is no answer
        p[ok, GUESS, held] += 1
        p[held, ANSWER, won] += g
        p[held, ANSWER, lost] += 1 - g
        p[held, GUESS, held] += 1
    else:
        p[ok, ANSWER, won] += 1
        p[ok, GUESS, broken] += 1
        p[held] = 0.0  # unreachable: a complete chain holds no guess
        p[held, :, held] = 1.0
    p[broken, :, broken] = 1.0  # refused while broken
    p[broken, REPAIR] = 0.0
    p[broken, REPAIR, ok] = 1.0


@functools.lru_cache(maxsize=64)
def _chain_mdp(model: ChainModel) -> TabularMDP:
    import numpy as np
    from budgetmix.training.envs.mdp import TabularMDP

    n = model.won + 2
    p = np.zeros((n, len(CHAIN_MOVES), n), dtype=np.float64)
    for j in range(model.hops + 1):
        _fill(model, p, j)
    for end in (model.won, model.won + 1):
        p[end, :, end] = 1.0
    success = np.arange(n) == model.won
    return TabularMDP(p, success, np.arange(n) >= model.won, 0)


def chain_ceiling(model: ChainModel, error_rate: float, fraction: float = 0.9) -> int:
    """The ceiling at ``error_rate``: the smallest T where the optimum for an agent
    erring at that rate reaches ``fraction`` of its no-limit success.

    Raises:
        ConfigError: a bad ``error_rate`` or ``fraction``.
    """
    from budgetmix.training.envs.mdp import find_ceiling

    return find_ceiling(model.mdp.with_errors(error_rate), fraction)


def repair_headroom(model: ChainModel, error_rate: float, budgets: Sequence[int]) -> list[float]:
    """Per budget, the success of the optimum for an agent erring at ``error_rate`` minus the
    success of the same policy when a broken chain ends the episode (no repair): the share
    of its success that comes from episodes that recovered from a malformed call.

    Raises:
        ConfigError: a bad ``error_rate`` or a budget < 1.
    """
    from budgetmix.training.envs.mdp import TabularMDP, turns_left_success_curve

    if not budgets or min(budgets) < 1:
        raise ConfigError(f"budgets: must be >= 1, got {list(budgets)}")
    top = max(budgets)
    tables = _Tables(model, error_rate)
    v, _ = tables.at(top)
    intended = tables.moves[1 : top + 1]
    noisy = model.mdp.with_errors(error_rate)
    p = noisy.transitions.copy()
    broken = [model.index(j, BROKEN) for j in range(model.hops + 1)]
    p[:, :, model.won + 1] += p[:, :, broken].sum(axis=2)  # into a broken chain: lost
    p[:, :, broken] = 0.0
    for s in broken:
        p[s] = 0.0
        p[s, :, s] = 1.0  # never entered now
    final = TabularMDP(p, noisy.success, noisy.terminal, noisy.start)
    curve = turns_left_success_curve(final, intended, top)
    return [float(v[b][noisy.start] - curve[b]) for b in budgets]


class _Tables:
    """``(V_e, Q)`` of one model and error rate, grown as longer budgets come, and the
    optimum's moves (ties to the fastest, by the discounted value at ``gamma`` 0.99)."""

    def __init__(self, model: ChainModel, error_rate: float) -> None:
        check_between("error_rate", error_rate, 0, 1)
        self.model, self.error_rate = model, error_rate
        self.v: Any = None
        self.q: Any = None
        self.moves: Any = None

    def at(self, turns: int) -> tuple[Any, Any]:
        from budgetmix.training.envs.mdp import (
            discounted_values,
            fastest_best,
            taken_action_values,
        )

        if self.q is None or self.q.shape[0] <= turns:
            mdp = self.model.mdp
            self.v, self.q = taken_action_values(mdp, self.error_rate, max(turns, 64))
            v_fast = discounted_values(mdp.with_errors(self.error_rate), 0.99)[0]
            self.moves = fastest_best(self.q, mdp.transitions @ v_fast)
        return self.v, self.q

    def move(self, turns: int, state: int) -> int:
        """The optimum's action id with ``turns`` (>= 1) turns left."""
        self.at(turns)
        return int(self.moves[turns][state])


def chain_q(
    model: ChainModel, error_rate: float, *, parse: Callable[[str], int | None] = parse_chain_move
) -> Callable[[Any, str], float]:
    """Exact Q for grading an agent that errs at ``error_rate`` (a diagnostics Q-function).

    ``Q(point, move)`` is the success of taking ``move`` at ``point.state``
    (``(links, mode)``) with ``point.turns_remaining`` turns, then continuing as
    the optimum for that error rate
    (:func:`~budgetmix.training.envs.mdp.taken_action_values`); an unparseable
    reply is a malformed call (the chain breaks).
    """
    tables = _Tables(model, error_rate)

    def q(point: Any, action: str) -> float:
        k = int(point.turns_remaining)
        v, table = tables.at(k)
        links, mode = (int(x) for x in point.state)
        move = parse(action)
        if move is None:
            return float(v[k - 1][model.index(links, BROKEN)])
        return float(table[k][model.index(links, mode)][move])

    return q


#: What SFT learns from the demonstrator: every move made, or only its optimal ones.
DEMO_LABELS = ("taken", "optimal")


class ChainDemonstrator:
    """The SFT demonstrator of ``fault-chain-compact``: the optimum for an agent erring at
    ``error_rate`` (or at ``plan_error_rate`` when given), executed with ``error_rate``
    (a random other move).

    ``labels``: ``"taken"`` (SFT learns every move made, errors included) or
    ``"optimal"`` (the errors are executed, so the episodes reach the states they
    lead to, but returned as :class:`~budgetmix.training.envs.demo.DemoReply` with
    ``imitate=False``: SFT learns only the optimum's moves, clean labels on noisy
    states).

    Budget-aware: ``argmax Q[turns_left][state]`` of that optimum. Budget-blind
    (``budget_blind``): the exact best blind policy over the BudgetMix prior at
    ``fractions`` of ``ceiling`` (default: the ceiling at ``error_rate``), which
    acts on the state and the turns used. Aware ties go to the fastest move, blind
    ones to the lowest action id.
    ``guess_share``: the guess route, whatever the budget. On an unfinished chain in
    ``OK`` mode the demonstrator fetches a guess at that share of its turns, and with a
    guess in hand it answers; SFT learns both (errors still apply, executed as above).
    This gives a budget-blind base that *samples* the two-move guess, so on-policy RL
    can find where guessing pays (docs/prereg.md, amendment 11:19 UTC 2026-12-03).
    0 draws nothing, so the demonstrator is as before.
    Called as the trainer's demo hook (``request.env``, ``request.state``) or
    through :meth:`move`.

    Raises:
        ConfigError: ``error_rate`` or ``guess_share`` outside ``[0, 1]``, ``labels`` not one of
            :data:`DEMO_LABELS`; when called, an environment without a :class:`ChainModel`.
    """

    def __init__(
        self,
        error_rate: float,
        seed: int | str,
        *,
        budget_blind: bool = False,
        ceiling: int | None = None,
        fractions: Sequence[float] = (0.25, 0.5, 0.75, 1.0),
        plan_error_rate: float | None = None,
        labels: str = "taken",
        guess_share: float = 0.0,
    ) -> None:
        check_between("error_rate", error_rate, 0, 1)
        self.guess_share = check_between("guess_share", guess_share, 0, 1)
        self.labels = check_choice("labels", labels, DEMO_LABELS)
        self.error_rate, self.budget_blind = error_rate, budget_blind
        self.plan = error_rate if plan_error_rate is None else plan_error_rate
        check_between("plan_error_rate", self.plan, 0, 1)
        self.ceiling, self.fractions = ceiling, tuple(fractions)
        self.rng = random.Random(seed)
        self._aware: dict[ChainModel, _Tables] = {}
        self._blind: dict[ChainModel, Any] = {}

    def _blind_table(self, model: ChainModel) -> Any:
        if model not in self._blind:
            from budgetmix.policies.samplers import BudgetMix
            from budgetmix.training.envs.mdp import blind_optimum

            top = self.ceiling or chain_ceiling(model, self.plan)
            mix = BudgetMix(top, self.fractions)
            budgets = [mix.turns_for(f) for f in mix.fractions]
            noisy = model.mdp.with_errors(self.plan)
            self._blind[model] = blind_optimum(noisy, budgets, mix.weights).actions
        return self._blind[model]

    def best(self, model: ChainModel, state: tuple[int, int], turns_left: int, used: int) -> int:
        """The noise-free action id at ``state`` with ``turns_left`` turns (``used`` already)."""
        s = model.index(*state)
        if self.budget_blind:
            table = self._blind_table(model)
            return int(table[min(used, len(table) - 1)][s])
        tables = self._aware.get(model)
        if tables is None:
            tables = self._aware[model] = _Tables(model, self.plan)
        return tables.move(max(1, turns_left), s)

    def _learned(
        self, model: ChainModel, state: tuple[int, int], turns_left: int, used: int
    ) -> int:
        """:meth:`best`, or with ``guess_share`` the guess route: a guess in hand is
        answered, and an unfinished chain is guessed at that share of turns."""
        if self.guess_share:
            links, mode = state
            if mode == HELD:
                return ANSWER
            if mode == OK and links < model.hops and self.rng.random() < self.guess_share:
                return GUESS
        return self.best(model, state, turns_left, used)

    def move(self, model: ChainModel, state: tuple[int, int], turns_left: int, used: int) -> str:
        """The (possibly wrong) move letter."""
        return CHAIN_MOVES[self._draw(model, state, turns_left, used)[1]]

    def _draw(
        self, model: ChainModel, state: tuple[int, int], turns_left: int, used: int
    ) -> tuple[int, int]:
        """The action id SFT should learn and the one taken (a random other one at
        ``error_rate``)."""
        best = taken = self._learned(model, state, turns_left, used)
        if self.error_rate and self.rng.random() < self.error_rate:
            taken = self.rng.choice([a for a in range(len(CHAIN_MOVES)) if a != best])
        return best, taken

    def __call__(self, request: Any) -> str | DemoReply:
        """The move for the live environment of ``request`` and its ledger's turns (with
        ``labels="optimal"``, in a :class:`DemoReply` that says whether SFT learns it)."""
        inner = unwrap(request.env)
        model, state = getattr(inner, "model", None), getattr(inner, "state", None)
        if not isinstance(model, ChainModel) or not isinstance(state, tuple):
            raise ConfigError(
                f"env: ChainDemonstrator needs fault-chain-compact, got {request.env.name!r}"
            )
        ledger = request.state
        best, taken = self._draw(model, state, ledger.turns_remaining, ledger.turn_number - 1)
        if self.labels == "taken":
            return CHAIN_MOVES[taken]
        return DemoReply(CHAIN_MOVES[taken], imitate=taken == best)


#: The environment keywords only the demonstrator reads (the registry drops them).
CHAIN_DEMO_OPTIONS = frozenset(
    {"demo_budget_aware", "demo_ceiling", "demo_gamma", "demo_labels", "demo_guess_share"}
)


def chain_demo(kwargs: Mapping[str, Any], error_rate: float, seed: int) -> ChainDemonstrator:
    """The registry's demonstrator factory: budget-blind unless ``demo_budget_aware``;
    ``demo_ceiling`` fixes the blind prior's ceiling (default: the ceiling at the
    error rate); ``demo_labels`` is :class:`ChainDemonstrator`'s ``labels`` (default
    ``"taken"``); ``demo_guess_share`` is its ``guess_share`` (default 0); ``demo_gamma``
    is accepted for the experiment presets and unused."""
    ceiling = kwargs.get("demo_ceiling")
    return ChainDemonstrator(
        error_rate,
        f"chain-demo:{seed}",
        budget_blind=not kwargs.get("demo_budget_aware", False),
        ceiling=None if ceiling is None else int(ceiling),
        labels=kwargs.get("demo_labels", "taken"),
        guess_share=float(kwargs.get("demo_guess_share", 0.0)),
    )
