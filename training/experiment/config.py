"""The end-to-end experiment's configuration: one frozen, validated dataclass and its presets.

Presets are sized for a 2-core laptop CPU: ``ci`` (the test suite, well under
a minute), ``quick`` (about a minute), ``default`` (about ten minutes, the demo:
fixed vs BudgetMix with one T per rollout in a GRPO group, the setting that
measured best, see docs/experiment.md), ``full`` (more seeds and steps, both
group settings).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from budgetmix._validate import check_between, check_int, check_list, check_number
from budgetmix.exceptions import ConfigError

__all__ = ["EXPERIMENT_PRESETS", "METHODS", "ExperimentConfig", "experiment_preset"]

#: Training arms: fixed budget at the ceiling, BudgetMix with one T per GRPO group
#: ("shared"), BudgetMix with one T per rollout ("mixed").
METHODS: tuple[str, ...] = ("fixed", "budgetmix", "budgetmix-mixed")

_INT_MIN = {
    "seeds": 1,
    "sft_steps": 1,
    "sft_batch": 1,
    "rl_steps": 1,
    "groups_per_step": 1,
    "group_size": 2,
    "eval_episodes": 1,
    "diag_episodes": 1,
    "inject_at": 1,
    "hidden_size": 8,
    "num_layers": 1,
    "threads": 1,
    "seed": 0,
}


@dataclass(frozen=True, kw_only=True)
class ExperimentConfig:
    """Everything :func:`~budgetmix.training.experiment.run_experiment` needs.

    Environment: ``desc`` (a fixed map) and ``success_rate`` (slip); ``ceiling``
    ``None`` means the oracle's (the smallest T where the budget-aware optimum
    reaches 90% of its no-limit success). Base: ``sft_steps`` of SFT on a noisy
    (``sft_error_rate``) budget-blind demonstrator (the stationary oracle policy for
    discount ``demo_gamma``). RL: ``rl_steps`` GRPO steps of
    ``groups_per_step`` x ``group_size`` rollouts per arm in ``methods`` and seed,
    so every arm gets the same number of rollouts and updates, at learning rate ``lr``
    with a KL anchor to the base of weight ``kl_coef`` (0: none, as in the presets'
    published runs; 0.05 kept the runs that collapsed in the ``full`` preset training,
    see docs/experiment.md). Evaluation: a
    Pass@(K,T) grid at ``eval_fractions`` of the ceiling (values above 1 are
    extrapolation), ``eval_episodes`` episodes per cell; diagnostics on
    ``diag_episodes`` episodes. ``base_model``: a saved base model directory to
    start RL from instead of running SFT (for ablations on one base).

    Raises:
        ConfigError: a value out of range; the message names the field.
    """

    preset: str = "default"
    desc: tuple[str, ...] = ("SFF", "HFF", "HHG")
    success_rate: float = 0.8
    ceiling: int | None = None
    methods: tuple[str, ...] = ("fixed", "budgetmix-mixed")
    budget_fractions: tuple[float, ...] = (0.25, 0.5, 0.75, 1.0)
    seeds: int = 2
    sft_steps: int = 200
    sft_batch: int = 16
    sft_error_rate: float = 0.15
    demo_gamma: float = 0.99
    sft_lr: float = 3e-3
    rl_steps: int = 50
    groups_per_step: int = 4
    group_size: int = 8
    lr: float = 5e-4
    kl_coef: float = 0.0
    eval_fractions: tuple[float, ...] = (0.25, 0.5, 0.75, 1.0, 1.5)
    eval_episodes: int = 64
    pass_ks: tuple[int, ...] = (1, 2, 4)
    diag_episodes: int = 32
    inject_at: int = 2
    hidden_size: int = 64
    num_layers: int = 2
    threads: int = 2
    seed: int = 0
    base_model: str | None = None

    def __post_init__(self) -> None:
        own = "ExperimentConfig"
        for name, low in _INT_MIN.items():
            check_int(f"{own}.{name}", getattr(self, name), minimum=low)
        if self.ceiling is not None:
            check_int(f"{own}.ceiling", self.ceiling, minimum=2)
        for name in ("success_rate", "sft_error_rate", "demo_gamma"):
            check_between(f"{own}.{name}", getattr(self, name), 0, 1)
        for name in ("sft_lr", "lr"):
            check_number(f"{own}.{name}", getattr(self, name), positive=True)
        check_number(f"{own}.kl_coef", self.kl_coef)
        for name in ("desc", "methods", "budget_fractions", "eval_fractions", "pass_ks"):
            object.__setattr__(self, name, tuple(check_list(f"{own}.{name}", getattr(self, name))))
        unknown = sorted(set(self.methods) - set(METHODS))
        if unknown or len(set(self.methods)) != len(self.methods):
            raise ConfigError(
                f"{own}.methods: unknown or repeated {unknown or self.methods}; "
                f"known: {', '.join(METHODS)}"
            )
        for f in self.budget_fractions:
            check_between(f"{own}.budget_fractions", f, 0, 1, open_low=True)
        for f in self.eval_fractions:
            check_between(f"{own}.eval_fractions", f, 0, 4, open_low=True)
        for k in self.pass_ks:
            check_int(f"{own}.pass_ks", k, minimum=1, maximum=self.eval_episodes)
        from budgetmix.training.envs.frozenlake_oracle import FrozenLakeModel

        try:
            FrozenLakeModel(self.desc, True, self.success_rate)
        except ConfigError as exc:
            raise ConfigError(f"ExperimentConfig.desc: {exc}") from None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    def with_overrides(self, **overrides: Any) -> ExperimentConfig:
        """A validated copy with some fields changed.

        Raises:
            ConfigError: an unknown field or an invalid value.
        """
        known = {f.name for f in fields(self)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ConfigError(f"unknown ExperimentConfig field(s): {', '.join(unknown)}")
        return replace(self, **overrides)


#: Named sizes; ``default`` is what ``budgetmix demo`` runs.
EXPERIMENT_PRESETS: dict[str, dict[str, Any]] = {
    "ci": {
        "seeds": 1,
        "sft_steps": 12,
        "sft_batch": 16,
        "rl_steps": 3,
        "groups_per_step": 2,
        "group_size": 4,
        "eval_fractions": (0.5, 1.0, 1.5),
        "eval_episodes": 8,
        "pass_ks": (1, 2),
        "diag_episodes": 8,
        "hidden_size": 32,
    },
    "quick": {
        "seeds": 1,
        "sft_steps": 60,
        "rl_steps": 8,
        "eval_episodes": 16,
        "diag_episodes": 12,
    },
    "default": {},
    "full": {
        "methods": ("fixed", "budgetmix", "budgetmix-mixed"),
        "seeds": 4,
        "eval_fractions": (0.25, 0.5, 0.75, 1.0, 1.5, 2.0),
        "sft_steps": 300,
        "rl_steps": 120,
        "eval_episodes": 128,
        "diag_episodes": 96,
    },
}


def experiment_preset(name: str, **overrides: Any) -> ExperimentConfig:
    """The preset ``name`` with ``overrides`` applied.

    Raises:
        ConfigError: unknown preset (the message lists them) or a bad override.
    """
    if name not in EXPERIMENT_PRESETS:
        raise ConfigError(
            f"preset: unknown experiment preset {name!r}; known: {', '.join(EXPERIMENT_PRESETS)}"
        )
    return ExperimentConfig(preset=name).with_overrides(**{**EXPERIMENT_PRESETS[name], **overrides})
