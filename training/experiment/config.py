"""The end-to-end experiment's configuration: one frozen, validated dataclass and its presets.

The design is preregistered in docs/prereg.md (arms, seeds, stopping rule,
endpoints). Presets: ``ci`` (the test suite), ``quick`` (numbers are noise),
``default`` (the demo: the preregistered design at its small size, 4 training
seeds per arm), ``full`` (8 seeds, a 4x larger token budget) and ``full-map2``
(``full`` on the second map, fixed in advance); ``tools`` and ``full-tools`` are
``default`` and ``full`` on the second environment, ``faulty-tools-compact``
(a chain of flaky lookups, :mod:`budgetmix.training.envs.faulty_tools_compact`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from budgetmix._validate import check_between, check_choice, check_int, check_list, check_number
from budgetmix.exceptions import ConfigError

__all__ = [
    "ARM_SETTINGS",
    "CHAIN_ENV",
    "CONFIRM",
    "EXPERIMENT_PRESETS",
    "GPU",
    "METHODS",
    "SECOND_MAP",
    "TOOLS_ENV",
    "ExperimentConfig",
    "experiment_preset",
]

#: Training arms: fixed budget at the ceiling; BudgetMix with every budget in each group
#: and budget-stratified baselines; the same with the notice's numbers masked (control);
#: the earlier settings (one T per group, one T per rollout with a group baseline).
METHODS: tuple[str, ...] = (
    "fixed",
    "budgetmix",
    "budgetmix-masked",
    "budgetmix-shared",
    "budgetmix-mixed",
)
#: Per arm: (group_budgets, notice format) of its RL and evaluation; fixed has one budget.
ARM_SETTINGS: dict[str, tuple[str, str]] = {
    "fixed": ("shared", "v1-compact"),
    "budgetmix": ("stratified", "v1-compact"),
    "budgetmix-masked": ("stratified", "v1-compact-masked"),
    "budgetmix-shared": ("shared", "v1-compact"),
    "budgetmix-mixed": ("mixed", "v1-compact"),
}
#: gymnasium's generate_random_map(size=4, p=0.8, seed=2026), chosen in advance (prereg).
SECOND_MAP: tuple[str, ...] = ("SFFF", "FFHF", "FFHH", "FFFG")
#: The second environment's settings (presets ``tools`` and ``full-tools``).
TOOLS_ENV: dict[str, Any] = {
    "env": "faulty-tools-compact",
    "env_kwargs": {"hops": 9, "fault_p": 0.2, "guess_p": 0.25},
}
_ENVS = ("frozenlake-compact", "faulty-tools-compact", "fault-chain-compact")
_TOOLS_KWARGS = ("hops", "fault_p", "guess_p")

_INT_MIN = {
    "seeds": 1,
    "sft_steps": 1,
    "sft_batch": 1,
    "rl_steps": 1,
    "token_budget": 1,
    "warmup_steps": 0,
    "val_episodes": 1,
    "sens_episodes": 1,
    "diag_samples": 1,
    "groups_per_step": 1,
    "group_size": 2,
    "eval_episodes": 1,
    "diag_episodes": 1,
    "inject_at": 1,
    "hidden_size": 8,
    "num_layers": 1,
    "threads": 1,
    "seed": 0,
    "max_number": 9,
}


@dataclass(frozen=True, kw_only=True)
class ExperimentConfig:
    """Everything :func:`~budgetmix.training.experiment.run_experiment` needs.

    Environment: ``env``, ``frozenlake-compact`` (the map ``desc`` and its slip
    ``success_rate``) or ``faulty-tools-compact`` (``env_kwargs``: ``hops``,
    ``fault_p``, ``guess_p``; ``desc`` and ``success_rate`` are unused); ``ceiling``
    ``None`` means the oracle's (the smallest T where the budget-aware optimum
    reaches 90% of its no-limit success). Base: ``sft_steps`` of SFT on a
    demonstrator that errs at ``sft_error_rate`` (a random other move): the
    budget-aware optimum (``demo_budget_aware``) or the stationary budget-blind
    policy for discount ``demo_gamma``; ``sft_labels`` ``"taken"`` learns every move
    the demonstrator made, ``"optimal"`` only its optimal ones (its errors are executed,
    not learned; ``fault-chain-compact`` only); ``sft_budgets`` ``"design"`` draws SFT's
    budgets like BudgetMix's (the design's fractions of the ceiling), ``"every"`` each
    T in 1..ceiling equally often (the base sees every turns-left value);
    ``sft_guess_share``: the chain demonstrator takes the guess route whatever the budget
    (a guess at that share of its turns on an unfinished chain, then the answer) and SFT
    learns it (``fault-chain-compact`` only). RL per arm in
    ``methods`` (see :data:`ARM_SETTINGS`) and training seed: GRPO groups of ``groups_per_step`` x
    ``group_size`` rollouts until ``token_budget`` tokens are sampled (the
    stopping rule, the same for every arm; ``rl_steps`` caps the steps), lr ``lr``
    with ``warmup_steps`` and linear decay, KL ``kl_coef`` to the SFT base,
    zero-variance sets skipped. Evaluation: final checkpoints only, a Pass@(K,T)
    grid at ``eval_fractions`` of the ceiling on ``eval_episodes`` shared episodes;
    the deployment pick on ``val_episodes`` separate validation episodes; budget
    sensitivity on ``sens_episodes`` fresh starts per turns-left value; the
    step-level diagnostic on ``diag_episodes`` base episodes with ``diag_samples``
    draws per point. ``base_model``: a saved base model directory to start RL from
    instead of running SFT (for ablations on one base). ``max_number``: the tiny
    model's tokenizer writes every integer up to it as one token (9: digits only, the
    char-level tokenizer of the earlier presets; see
    :func:`~budgetmix.training.rollouts.tokenizer.build_char_tokenizer`). ``init_model``: SFT
    starts from this pretrained model (a folder, or ``smollm2-135m-instruct``:
    :mod:`~budgetmix.training.experiment.pretrained`) with its own tokenizer.

    Raises:
        ConfigError: a value out of range; the message names the field.
    """

    preset: str = "default"
    env: str = "frozenlake-compact"
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    desc: tuple[str, ...] = ("SFF", "HFF", "HHG")
    success_rate: float = 0.8
    ceiling: int | None = None
    methods: tuple[str, ...] = ("fixed", "budgetmix", "budgetmix-masked")
    budget_fractions: tuple[float, ...] = (0.25, 0.5, 0.75, 1.0)
    seeds: int = 4
    sft_steps: int = 200
    sft_batch: int = 16
    sft_error_rate: float = 0.3
    sft_labels: str = "taken"
    sft_budgets: str = "design"
    sft_guess_share: float = 0.0
    demo_budget_aware: bool = True
    demo_gamma: float = 0.99
    sft_lr: float = 3e-3
    rl_steps: int = 400
    token_budget: int = 6000
    groups_per_step: int = 4
    group_size: int = 8
    lr: float = 2.5e-4
    warmup_steps: int = 3
    kl_coef: float = 0.05
    eval_fractions: tuple[float, ...] = (0.25, 0.5, 0.75, 1.0, 1.5)
    eval_episodes: int = 64
    val_episodes: int = 32
    sens_episodes: int = 64
    pass_ks: tuple[int, ...] = (1, 2, 4)
    diag_episodes: int = 32
    diag_samples: int = 16
    inject_at: int = 2
    hidden_size: int = 64
    num_layers: int = 2
    max_number: int = 9
    init_model: str | None = None
    threads: int = 2
    seed: int = 0
    base_model: str | None = None

    def __post_init__(self) -> None:
        own = "ExperimentConfig"
        for name, low in _INT_MIN.items():
            check_int(f"{own}.{name}", getattr(self, name), minimum=low)
        if self.ceiling is not None:
            check_int(f"{own}.ceiling", self.ceiling, minimum=2)
        for name in ("success_rate", "sft_error_rate", "demo_gamma", "sft_guess_share"):
            check_between(f"{own}.{name}", getattr(self, name), 0, 1)
        for name in ("sft_lr", "lr"):
            check_number(f"{own}.{name}", getattr(self, name), positive=True)
        check_number(f"{own}.kl_coef", self.kl_coef)
        if not isinstance(self.demo_budget_aware, bool):
            raise ConfigError(f"{own}.demo_budget_aware: must be true or false")
        check_choice(f"{own}.sft_labels", self.sft_labels, ("taken", "optimal"))
        check_choice(f"{own}.sft_budgets", self.sft_budgets, ("design", "every"))
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
        if self.init_model is not None and self.max_number > 9:
            raise ConfigError(f"{own}.init_model: a pretrained model keeps its tokenizer; "
                              "max_number must stay 9")  # fmt: skip
        self._check_env()

    def _check_env(self) -> None:
        own = "ExperimentConfig"
        if self.env not in _ENVS:
            raise ConfigError(f"{own}.env: unknown {self.env!r}; known: {', '.join(_ENVS)}")
        if not isinstance(self.env_kwargs, dict):
            raise ConfigError(f"{own}.env_kwargs: must be a mapping")
        object.__setattr__(self, "env_kwargs", dict(self.env_kwargs))
        if self.env in ("faulty-tools-compact", "fault-chain-compact"):
            from budgetmix.training.envs.fault_chain_oracle import ChainModel
            from budgetmix.training.envs.faulty_tools_oracle import ToolsModel

            unknown = sorted(set(self.env_kwargs) - set(_TOOLS_KWARGS))
            if unknown:
                raise ConfigError(
                    f"{own}.env_kwargs: unknown {unknown}; known: {', '.join(_TOOLS_KWARGS)}"
                )
            try:
                (ToolsModel if self.env == "faulty-tools-compact" else ChainModel)(
                    **self.env_kwargs
                )
            except ConfigError as exc:
                raise ConfigError(f"{own}.env_kwargs: {exc}") from None
            return
        if self.env_kwargs:
            raise ConfigError(f"{own}.env_kwargs: {self.env} takes desc and success_rate")
        from budgetmix.training.envs.frozenlake_oracle import FrozenLakeModel

        try:
            FrozenLakeModel(self.desc, True, self.success_rate)
        except ConfigError as exc:
            raise ConfigError(f"ExperimentConfig.desc: {exc}") from None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form. A field added after runs were fingerprinted is left out while it
        holds the value that reproduces those runs (:data:`_ADDED_LATER`), so their config
        hashes stay valid."""
        return {
            k: list(v) if isinstance(v, tuple) else v
            for k, v in asdict(self).items()
            if k not in _ADDED_LATER or v != _ADDED_LATER[k]
        }

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


#: Fields added after runs were fingerprinted, with the value every earlier run had.
_ADDED_LATER: dict[str, Any] = {
    "sft_labels": "taken",
    "sft_budgets": "design",
    "sft_guess_share": 0.0,
}

#: Issue 29's environment as the confirmatory design runs it (docs/prereg.md, *Issue 29*).
CHAIN_ENV: dict[str, Any] = {
    "env": "fault-chain-compact",
    # 4 links, faults 30% since prereg amendment 19:52 UTC 2026-12-02 (6 links, faults 20%
    # before 19:30 and 5 links from 19:30): the same observation as the 4-link chain every
    # pilot learned, its threshold at 5/6 turns left, VoI >= 10 points at 25/50% to e 0.38
    "env_kwargs": {"hops": 4, "fault_p": 0.3, "guess_p": 0.3},
    "sft_error_rate": 0.2,
    "max_number": 99,
    "eval_fractions": (0.25, 0.5, 0.75, 1.0),
}
#: Issue 29's confirmatory design, sized for the shared CPU (docs/prereg.md, *Issue 29*):
#: every RL run takes exactly ``rl_steps`` updates (the token cap never binds).
CONFIRM: dict[str, Any] = {
    **CHAIN_ENV,
    "sft_steps": 1000,  # prereg amendment 13:35 UTC 2026-12-02: clean labels
    "sft_labels": "optimal",
    "sft_budgets": "every",  # prereg amendment 13:57 UTC 2026-12-02
    "seeds": 4,
    "rl_steps": 30,
    "groups_per_step": 2,
    "token_budget": 10**9,
    "eval_episodes": 128,
    "sens_episodes": 32,
    "threads": 1,
}

#: The same design on one GPU (issue 29 item 8; bench/gpu/design.sh): SmolLM2-135M-Instruct,
#: 8 training seeds per base, 256 shared episodes per cell.
GPU: dict[str, Any] = {
    **CONFIRM,
    "max_number": 9,
    "init_model": "smollm2-135m-instruct",
    "seeds": 8,
    "eval_episodes": 256,
    "sens_episodes": 64,
    "sft_lr": 1e-4,
    "lr": 1e-5,
}

#: Named sizes; ``default`` is what ``budgetmix demo`` runs.
EXPERIMENT_PRESETS: dict[str, dict[str, Any]] = {
    "ci": {
        "seeds": 2,
        "sft_steps": 12,
        "sft_batch": 16,
        "rl_steps": 3,
        "token_budget": 10**6,
        "groups_per_step": 2,
        "group_size": 4,
        "eval_fractions": (0.5, 1.0, 1.5),
        "eval_episodes": 8,
        "val_episodes": 4,
        "sens_episodes": 4,
        "pass_ks": (1, 2),
        "diag_episodes": 4,
        "diag_samples": 2,
        "hidden_size": 32,
    },
    "quick": {  # the test suite's `demo --quick`: the structure, not the numbers
        "seeds": 2,
        "sft_steps": 20,
        "token_budget": 500,
        "eval_episodes": 8,
        "val_episodes": 4,
        "sens_episodes": 8,
        "diag_episodes": 4,
        "diag_samples": 2,
    },
    # the reduced design (prereg amendment 21:40 UTC 2026-12-04): fits 10 min on 2 cores
    "default": {
        "sft_steps": 100,
        "token_budget": 3000,
        "eval_episodes": 32,
        "val_episodes": 16,
        "sens_episodes": 32,
        "diag_episodes": 8,  # prereg amendment 14:02 (CPU)
        "diag_samples": 8,
    },
    "default-6k": {"diag_episodes": 8, "diag_samples": 8},  # the design before 2026-12-04
    "full": {
        "seeds": 8,
        "token_budget": 24_000,
        "rl_steps": 1600,
        "eval_episodes": 128,
        "diag_episodes": 64,
    },
    "full-map2": {
        "desc": SECOND_MAP,
        "seeds": 8,
        "token_budget": 24_000,
        "rl_steps": 1600,
        "eval_episodes": 128,
        "diag_episodes": 64,
    },
    # the second environment (issue 19 item 5): `default-6k` and `full` on faulty-tools-compact
    "tools": {**TOOLS_ENV, "diag_episodes": 8, "diag_samples": 8},
    "confirm": CONFIRM,
    "gpu": GPU,
    "full-tools": {
        **TOOLS_ENV,
        "seeds": 8,
        "token_budget": 24_000,
        "rl_steps": 1600,
        "eval_episodes": 128,
        "diag_episodes": 64,
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
