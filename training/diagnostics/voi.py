"""The value of budget information (VoI): what an agent that errs gains by reading the budget.

For a compact environment with an exact model and an agent that takes a random
other action with probability ``e`` (:meth:`~budgetmix.training.envs.mdp.TabularMDP.with_errors`),
:func:`voi_table` gives per budget ``T = round(f * ceiling)`` (the BudgetMix
sampler's budgets):

* ``aware`` -- the exact success of the best budget-*aware* policy for that
  agent (backward induction on the error model, the budget known);
* ``blind`` -- the exact success at ``T`` of the best budget-*blind* policy: one
  policy for every budget, allowed to depend on the state and the turns used,
  maximising the mean success over the BudgetMix prior (equal weight per
  fraction unless ``weights``; :func:`~budgetmix.training.envs.mdp.blind_optimum`);
* ``voi = aware - blind`` (>= 0 up to float error).

If the VoI is about zero at every budget, no arm of an experiment can gain from
reading the budget, whatever it learns. :func:`gate` is the design gate: VoI of
at least ``threshold`` (10 points by default) at 25% and at 50% of the ceiling.

Environments: :data:`EXACT_MODELS` maps a registered compact environment to its
exact model (:func:`exact_model`), with the environment's own ceiling rule:
the ceiling of the *noiseless* optimum for the old designs (the experiments'
published ceilings), or the ceiling at the agent's error rate where the
environment says so. ``budgetmix voi`` prints the table.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from budgetmix._validate import check_between
from budgetmix.exceptions import ConfigError
from budgetmix.policies.samplers import BudgetMix
from budgetmix.training.envs.mdp import (
    TabularMDP,
    blind_optimum,
    finite_horizon_values,
)

__all__ = [
    "DEFAULT_FRACTIONS",
    "EXACT_MODELS",
    "ExactModel",
    "GateVerdict",
    "VoIRow",
    "VoITable",
    "env_voi",
    "exact_model",
    "gate",
    "voi_table",
]

#: The BudgetMix fractions of the ceiling (the experiments' budgets).
DEFAULT_FRACTIONS: tuple[float, ...] = (0.25, 0.5, 0.75, 1.0)


@dataclass(frozen=True, eq=False)
class ExactModel:
    """A compact environment's exact model.

    ``ceiling_for(e)``: the environment's ceiling for an agent that errs at ``e``
    (its rule: the noiseless ceiling, or the ceiling at ``e``); ``ceiling_rule``
    says which in words. ``q_for(e)``: the diagnostics Q-function that grades a
    move against the optimum for an agent erring at ``e`` (``Q(point, move)``);
    ``moves`` the move letters in action-id order and ``parse`` their reader.
    """

    name: str
    label: str
    mdp: TabularMDP
    ceiling_for: Callable[[float], int]
    ceiling_rule: str
    q_for: Callable[[float], Callable[[Any, str], float]]
    moves: str
    parse: Callable[[str], int | None]


def _frozenlake(kwargs: Mapping[str, Any]) -> ExactModel:
    from budgetmix.training.diagnostics.episodes import frozenlake_q
    from budgetmix.training.envs.frozenlake_compact import DEMO_MAP, MOVE_LETTERS, parse_move
    from budgetmix.training.envs.frozenlake_oracle import FrozenLakeModel
    from budgetmix.training.envs.frozenlake_oracle import find_ceiling as map_ceiling

    desc = tuple(kwargs.get("desc", DEMO_MAP))
    model = FrozenLakeModel(desc, True, float(kwargs.get("success_rate", 0.8)))
    ceiling = map_ceiling(model)
    return ExactModel(
        "frozenlake-compact",
        f"map {'/'.join(desc)}, slip {model.success_rate}",
        model.mdp,
        lambda e: ceiling,
        "noiseless",
        lambda e: frozenlake_q(model, error_rate=e),
        MOVE_LETTERS,
        parse_move,
    )


def _tools(kwargs: Mapping[str, Any]) -> ExactModel:
    from budgetmix.training.envs.faulty_tools_oracle import (
        TOOL_MOVES,
        ToolsModel,
        parse_tool_move,
        tools_q,
    )
    from budgetmix.training.envs.faulty_tools_oracle import find_ceiling as tools_ceiling

    model = ToolsModel(**kwargs)
    ceiling = tools_ceiling(model)
    return ExactModel(
        "faulty-tools-compact",
        f"{model.hops}-hop lookup chain, fault_p {model.fault_p}, guess_p {model.guess_p}",
        model.mdp,
        lambda e: ceiling,
        "noiseless",
        lambda e: tools_q(model, error_rate=e),
        TOOL_MOVES,
        parse_tool_move,
    )


def _chain(kwargs: Mapping[str, Any]) -> ExactModel:
    from budgetmix.training.envs.fault_chain_oracle import (
        CHAIN_MOVES,
        ChainModel,
        chain_ceiling,
        chain_q,
        parse_chain_move,
    )

    model = ChainModel(**kwargs)
    return ExactModel(
        "fault-chain-compact",
        f"{model.hops}-link chain with repairs, fault_p {model.fault_p}, guess_p {model.guess_p}",
        model.mdp,
        lambda e: chain_ceiling(model, e),
        "at the error rate",
        lambda e: chain_q(model, e),
        CHAIN_MOVES,
        parse_chain_move,
    )


#: Registered compact environment -> builder of its exact model from the env's kwargs.
EXACT_MODELS: dict[str, Callable[[Mapping[str, Any]], ExactModel]] = {
    "frozenlake-compact": _frozenlake,
    "faulty-tools-compact": _tools,
    "fault-chain-compact": _chain,
}


def exact_model(name: str, kwargs: Mapping[str, Any] | None = None) -> ExactModel:
    """The exact model of the compact environment ``name`` built with ``kwargs``.

    The options only the SFT demonstrator reads (the registry's ``demo_options``:
    ``demo_gamma``, ``demo_budget_aware``, ...) are ignored.

    Raises:
        ConfigError: an environment without an exact model, or bad ``kwargs``
            (the message names the field).
    """
    builder = EXACT_MODELS.get(name)
    if builder is None:
        known = ", ".join(sorted(EXACT_MODELS))
        raise ConfigError(f"env: no exact model for {name!r}; known: {known}")
    from budgetmix.training.envs.registry import env_spec

    demo = env_spec(name).demo_options
    own = {k: v for k, v in (kwargs or {}).items() if k not in demo}
    try:
        return builder(own)
    except TypeError as exc:
        raise ConfigError(f"env_kwargs: {exc}") from None


@dataclass(frozen=True, slots=True)
class VoIRow:
    """One budget: the fraction of the ceiling, ``T``, aware and blind success (probabilities)."""

    fraction: float
    budget: int
    aware: float
    blind: float

    @property
    def voi(self) -> float:
        """``aware - blind``."""
        return self.aware - self.blind

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (with ``voi``)."""
        return {
            "fraction": self.fraction,
            "budget": self.budget,
            "aware": self.aware,
            "blind": self.blind,
            "voi": self.voi,
        }


@dataclass(frozen=True, slots=True)
class VoITable:
    """The VoI of one design (see the module notes); ``blind_mean`` is the blind objective."""

    env: str
    label: str
    error_rate: float
    ceiling: int
    ceiling_rule: str
    weights: tuple[float, ...]
    rows: tuple[VoIRow, ...]
    blind_mean: float

    def row(self, fraction: float) -> VoIRow:
        """The row of ``fraction``.

        Raises:
            ConfigError: ``fraction`` is not one of the table's.
        """
        for r in self.rows:
            if abs(r.fraction - fraction) < 1e-9:
                return r
        have = ", ".join(f"{r.fraction:g}" for r in self.rows)
        raise ConfigError(f"fraction: {fraction:g} is not in the table ({have})")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "env": self.env,
            "label": self.label,
            "error_rate": self.error_rate,
            "ceiling": self.ceiling,
            "ceiling_rule": self.ceiling_rule,
            "weights": list(self.weights),
            "blind_mean": self.blind_mean,
            "rows": [r.to_dict() for r in self.rows],
        }

    def format(self) -> str:
        """The table as text, success and VoI in points."""
        lines = [
            f"VoI of {self.env} ({self.label}), error rate {self.error_rate:g}, "
            f"ceiling {self.ceiling} ({self.ceiling_rule})",
            f"{'budget':>6}  {'T':>4}  {'aware':>6}  {'blind':>6}  {'VoI':>6}   (points)",
        ]
        for r in self.rows:
            share = f"{r.fraction * 100:.0f}%"
            lines.append(
                f"{share:>6}  {r.budget:>4}  {_pts(r.aware):>6}  {_pts(r.blind):>6}"
                f"  {_pts(r.voi):>6}"
            )
        return "\n".join(lines)


def _pts(p: float) -> str:
    return f"{round(p * 100, 1) + 0.0:.1f}"  # + 0.0: no "-0.0" from float error


def voi_table(
    mdp: TabularMDP,
    *,
    error_rate: float,
    ceiling: int,
    fractions: Sequence[float] = DEFAULT_FRACTIONS,
    weights: Sequence[float] | None = None,
    env: str = "",
    label: str = "",
    ceiling_rule: str = "given",
) -> VoITable:
    """The exact VoI table of ``mdp`` for an agent erring at ``error_rate`` (module notes).

    Budgets are ``BudgetMix(ceiling, fractions).turns_for(f)``; ``weights`` weight
    the fractions in the blind policy's prior (equal by default).

    Raises:
        ConfigError: ``error_rate`` outside ``[0, 1]``, a bad ceiling, fractions or weights.
    """
    check_between("error_rate", error_rate, 0, 1)
    mix = BudgetMix(ceiling, tuple(fractions), None if weights is None else tuple(weights))
    budgets = [mix.turns_for(f) for f in mix.fractions]
    noisy = mdp.with_errors(error_rate)
    v, _ = finite_horizon_values(noisy, max(budgets))
    assert mix.weights is not None  # BudgetMix fills them in
    blind = blind_optimum(noisy, budgets, mix.weights)
    rows = tuple(
        VoIRow(f, b, float(v[b, noisy.start]), float(blind.curve[b]))
        for f, b in zip(mix.fractions, budgets, strict=True)
    )
    return VoITable(env, label, error_rate, ceiling, ceiling_rule, blind.weights, rows, blind.mean)


def env_voi(
    name: str,
    error_rate: float,
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    fractions: Sequence[float] = DEFAULT_FRACTIONS,
    weights: Sequence[float] | None = None,
    ceiling: int | None = None,
) -> VoITable:
    """:func:`voi_table` for a registered compact environment (``ceiling``: its own rule).

    Raises:
        ConfigError: as :func:`exact_model` and :func:`voi_table`.
    """
    check_between("error_rate", error_rate, 0, 1)
    model = exact_model(name, env_kwargs)
    rule = "given" if ceiling is not None else model.ceiling_rule
    top = model.ceiling_for(error_rate) if ceiling is None else ceiling
    return voi_table(
        model.mdp,
        error_rate=error_rate,
        ceiling=top,
        fractions=fractions,
        weights=weights,
        env=name,
        label=model.label,
        ceiling_rule=rule,
    )


@dataclass(frozen=True, slots=True)
class GateVerdict:
    """The design gate: ``passed`` when the VoI reaches ``threshold`` at every gate fraction."""

    passed: bool
    threshold: float
    fractions: tuple[float, ...]
    voi: tuple[float, ...]
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {k: getattr(self, k) for k in self.__slots__}


def gate(
    table: VoITable, *, threshold: float = 0.10, fractions: Sequence[float] = (0.25, 0.5)
) -> GateVerdict:
    """Whether the VoI at each of ``fractions`` is at least ``threshold`` (a probability:
    0.10 is 10 points); ``reason`` says which budget fails, or that all pass.

    Raises:
        ConfigError: a fraction the table does not have, or no fractions.
    """
    if not fractions:
        raise ConfigError("fractions: give at least one gate fraction")
    vois = tuple(table.row(f).voi for f in fractions)
    low = [(f, v) for f, v in zip(fractions, vois, strict=True) if v < threshold - 1e-12]
    need = f"{threshold * 100:g} points"
    if low:
        worst = ", ".join(f"{v * 100:.1f} at {f * 100:g}%" for f, v in low)
        reason = f"VoI below {need}: {worst} (error rate {table.error_rate:g})"
    else:
        reason = f"VoI of at least {need} at every gate budget (error rate {table.error_rate:g})"
    return GateVerdict(not low, threshold, tuple(fractions), vois, reason)
