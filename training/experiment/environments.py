"""The experiment's environments: what :func:`~budgetmix.training.experiment.run_experiment`
needs to know about one, behind one small record.

:class:`ExperimentEnv` holds the registry name and keywords the tasks and the
trainer build it with, the exact model's facts (the ceiling, the Q-function, the
success curves of the budget-aware optimum and of the best budget-blind policy)
and how to read a reply (``parse`` into ``moves``), plus the budget-dependent
decision at the start state that the sensitivity diagnostic probes.
:func:`experiment_env` builds it from an
:class:`~budgetmix.training.experiment.config.ExperimentConfig`:

* ``frozenlake-compact`` (default): the map ``desc`` at ``success_rate``; at the
  demo map's start cell *right* is strictly best with 4-9 turns left, *wait* with 10+;
* ``faulty-tools-compact``: a chain of ``hops`` flaky lookups
  (:mod:`budgetmix.training.envs.faulty_tools_compact`); at the start *guess* is
  strictly best while the lookups and the answer cannot fit in the turns left
  (1-9 turns left with the presets' 9 hops), *look up* otherwise;
* ``fault-chain-compact`` (issue 29's design): a chain of ``hops`` flaky lookups
  where a mistake breaks the chain until a repair
  (:mod:`budgetmix.training.envs.fault_chain_compact`); everything is graded for
  an agent that errs at ``sft_error_rate`` (the ceiling, Q, the curves): at the
  start a guess (``g`` then ``a``) is best with few turns left, lookups otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from budgetmix.exceptions import ConfigError
from budgetmix.training.diagnostics.episodes import QFunction, frozenlake_q
from budgetmix.training.envs.fault_chain_compact import CHAIN_ENV_NAME
from budgetmix.training.envs.faulty_tools_compact import TOOLS_COMPACT_ENV_NAME
from budgetmix.training.envs.frozenlake_compact import COMPACT_ENV_NAME, MOVE_LETTERS, parse_move

if TYPE_CHECKING:
    from budgetmix.training.experiment.config import ExperimentConfig

__all__ = ["ENV_NAMES", "ExperimentEnv", "experiment_env"]

#: Environments the experiment runs on.
ENV_NAMES: tuple[str, ...] = (COMPACT_ENV_NAME, TOOLS_COMPACT_ENV_NAME, CHAIN_ENV_NAME)
#: Keywords of ``faulty-tools-compact`` an ExperimentConfig may set (``env_kwargs``).
TOOLS_KWARGS: tuple[str, ...] = ("hops", "fault_p", "guess_p")

#: ``top -> (aware, blind)``: exact success from the start for T = 0..top.
Curves = Callable[[int], tuple[Sequence[float], Sequence[float]]]


@dataclass(frozen=True, slots=True)
class ExperimentEnv:
    """One environment of the experiment (see the module notes).

    ``kwargs`` build tasks and demonstrators (demo options included); ``label`` is
    one line for the report; ``sensitivity_from`` is the smallest turns-left value
    the sensitivity diagnostic probes; ``decision`` says the start state's
    budget-dependent choice in words; ``state_name`` names that state.
    """

    name: str
    kwargs: dict[str, Any]
    label: str
    ceiling: int
    q: QFunction
    parse: Callable[[str], int | None]
    moves: tuple[str, ...]
    curves: Curves
    sensitivity_from: int
    decision: str
    state_name: str

    def describe(self) -> dict[str, Any]:
        """JSON-ready facts for the report."""
        return {
            "name": self.name,
            "label": self.label,
            "moves": list(self.moves),
            "decision": self.decision,
            "state_name": self.state_name,
            "sensitivity_from": self.sensitivity_from,
        }


def _frozenlake(config: ExperimentConfig) -> ExperimentEnv:
    from budgetmix.training.envs.frozenlake_oracle import (
        FrozenLakeModel,
        aware_success_curve,
        find_ceiling,
        policy_success_curve,
        stationary_policy,
    )

    model = FrozenLakeModel(config.desc, True, config.success_rate)

    def curves(top: int) -> tuple[Sequence[float], Sequence[float]]:
        blind = stationary_policy(model, config.demo_gamma)
        aware = aware_success_curve(model, top).tolist()
        return aware, policy_success_curve(model, blind, top).tolist()

    return ExperimentEnv(
        name=COMPACT_ENV_NAME,
        kwargs={
            "desc": list(config.desc),
            "success_rate": config.success_rate,
            "demo_gamma": config.demo_gamma,
            "demo_budget_aware": config.demo_budget_aware,
        },
        label=f"map {'/'.join(config.desc)}, slip {config.success_rate}",
        ceiling=config.ceiling or find_ceiling(model),
        q=frozenlake_q(model),
        parse=parse_move,
        moves=tuple(MOVE_LETTERS),
        curves=curves,
        sensitivity_from=2,
        decision="go right with 4-9 turns left, wait with 10+",
        state_name="start cell",
    )


def _tools(config: ExperimentConfig) -> ExperimentEnv:
    from budgetmix.training.envs.faulty_tools_oracle import (
        TOOL_MOVES,
        ToolsModel,
        aware_success_curve,
        find_ceiling,
        guess_budgets,
        parse_tool_move,
        policy_success_curve,
        stationary_policy,
        tools_q,
    )

    model = ToolsModel(**config.env_kwargs)
    ceiling = config.ceiling or find_ceiling(model)
    guess = guess_budgets(model, 2 * ceiling)

    def curves(top: int) -> tuple[Sequence[float], Sequence[float]]:
        blind = stationary_policy(model, config.demo_gamma)
        return aware_success_curve(model, top), policy_success_curve(model, blind, top)

    return ExperimentEnv(
        name=TOOLS_COMPACT_ENV_NAME,
        kwargs={
            **config.env_kwargs,
            "demo_gamma": config.demo_gamma,
            "demo_budget_aware": config.demo_budget_aware,
        },
        label=f"{model.hops}-hop lookup chain, fault_p {model.fault_p}, guess_p {model.guess_p}",
        ceiling=ceiling,
        q=tools_q(model),
        parse=parse_tool_move,
        moves=tuple(TOOL_MOVES),
        curves=curves,
        sensitivity_from=1,
        decision=_guess_words(guess),
        state_name="start state",
    )


def _guess_words(guess: Sequence[int]) -> str:
    if not guess:
        return "guessing is never strictly best"
    runs = f"{guess[0]}-{guess[-1]}" if len(guess) > 1 else str(guess[0])
    if list(guess) != list(range(guess[0], guess[-1] + 1)):
        runs = ", ".join(map(str, guess))
    return f"guess with {runs} turns left, look up otherwise"


def _chain(config: ExperimentConfig) -> ExperimentEnv:
    """Issue 29's environment, graded for an agent erring at ``sft_error_rate``: the
    ceiling, the Q-function, the curves and the start decision are that agent's."""
    import numpy as np
    from budgetmix.policies.samplers import BudgetMix
    from budgetmix.training.envs.fault_chain_oracle import (
        CHAIN_MOVES,
        GUESS,
        ChainModel,
        chain_ceiling,
        chain_q,
        parse_chain_move,
    )
    from budgetmix.training.envs.mdp import (
        blind_optimum,
        elapsed_success_curve,
        taken_action_values,
    )

    model, e = ChainModel(**config.env_kwargs), config.sft_error_rate
    ceiling = config.ceiling or chain_ceiling(model, e)
    noisy = model.mdp.with_errors(e)

    def curves(top: int) -> tuple[Sequence[float], Sequence[float]]:
        v, _ = taken_action_values(model.mdp, e, top)
        mix = BudgetMix(ceiling, tuple(config.budget_fractions))
        blind = blind_optimum(noisy, [mix.turns_for(f) for f in mix.fractions], mix.weights)
        rows = blind.actions  # past the prior's longest budget: its last turn's choices
        table = np.concatenate([rows, np.repeat(rows[-1:], max(0, top - len(rows)), axis=0)])
        return v[:, noisy.start].tolist(), elapsed_success_curve(noisy, table, top).tolist()

    _, q = taken_action_values(model.mdp, e, 2 * ceiling)
    start = q[:, noisy.start]
    guess = [k for k in range(1, 2 * ceiling + 1)
             if np.ptp(start[k]) > 1e-9 and int(start[k].argmax()) == GUESS]  # fmt: skip
    return ExperimentEnv(
        name=CHAIN_ENV_NAME,
        kwargs={
            **config.env_kwargs,
            "demo_gamma": config.demo_gamma,
            "demo_budget_aware": config.demo_budget_aware,
            "demo_ceiling": ceiling,
            "demo_labels": config.sft_labels,
            # only when set, so earlier runs' configs (and their hashes) are unchanged
            **({"demo_guess_share": config.sft_guess_share} if config.sft_guess_share else {}),
        },
        label=(
            f"{model.hops}-link chain with repairs, fault_p {model.fault_p}, guess_p "
            f"{model.guess_p}; graded for an agent erring {e:g}"
        ),
        ceiling=ceiling,
        q=chain_q(model, e),
        parse=parse_chain_move,
        moves=tuple(CHAIN_MOVES),
        curves=curves,
        sensitivity_from=1,
        decision=_guess_words(guess).replace("look up otherwise", "look up otherwise (g, then a)"),
        state_name="start state",
    )


def experiment_env(config: ExperimentConfig) -> ExperimentEnv:
    """The environment ``config.env`` names, with its exact model.

    Raises:
        ConfigError: an invalid map or environment keyword (the message names it), or
            ``sft_labels="optimal"`` or an ``sft_guess_share`` for an environment whose
            demonstrator has no such option.
    """
    if config.env == CHAIN_ENV_NAME:
        return _chain(config)
    if config.sft_guess_share:
        raise ConfigError(
            f"ExperimentConfig.sft_guess_share: needs {CHAIN_ENV_NAME!r}'s demonstrator; "
            f"{config.env!r} has no guess"
        )
    if config.sft_labels != "taken":
        raise ConfigError(
            f"ExperimentConfig.sft_labels: 'optimal' needs {CHAIN_ENV_NAME!r}'s demonstrator; "
            f"{config.env!r} learns the moves taken (sft_labels 'taken')"
        )
    return _tools(config) if config.env == TOOLS_COMPACT_ENV_NAME else _frozenlake(config)
