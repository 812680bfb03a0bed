"""The training configuration: one frozen, validated dataclass, presets, and file loading.

Every field has a default; a preset is a named set of overrides. Unknown
keys, unknown presets and invalid values raise :class:`ConfigError` naming
the field. Fixed-budget training and BudgetMix differ only in ``sampler``.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from budgetmix._validate import (
    check_between,
    check_choice,
    check_int,
    check_ints,
    check_number,
    check_str,
)
from budgetmix.exceptions import ConfigError
from budgetmix.notice import NOTICE_FORMATS
from budgetmix.policies.samplers import BudgetSampler, sampler_from_config

__all__ = ["PRESETS", "TrainConfig", "load_config", "preset"]

_INT_MIN: dict[str, int] = {
    "steps": 0,
    "sft_steps": 0,
    "groups_per_step": 1,
    "group_size": 1,
    "sft_batch": 1,
    "ppo_epochs": 1,
    "minibatch_size": 1,
    "max_new_tokens": 1,
    "max_total_tokens": 8,
    "num_train_seeds": 1,
    "save_every": 1,
    "hidden_size": 8,
    "num_layers": 1,
    "num_heads": 1,
    "num_kv_heads": 1,
    "lora_rank": 1,
    "warmup_steps": 0,
    "rollout_batch_size": 1,
    "seed": 0,
    "threads": 1,
    "eval_episodes": 0,
}
_POSITIVE_FLOAT = ("lr", "sft_lr", "temperature", "clip_eps", "max_grad_norm")
_CHOICES: dict[str, tuple[str, ...]] = {
    "algorithm": ("grpo", "rloo"),
    "group_budgets": ("shared", "mixed", "stratified"),
    "lr_decay": ("none", "linear"),
    "zero_variance": ("keep", "skip"),
    "arch": ("llama", "qwen2"),
    "token_check": ("off", "report", "strict"),
    "dtype": ("float32", "bfloat16", "float16"),
}


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """Everything a training run needs; see docs/training.md for each field.

    Raises:
        ConfigError: a value is out of range or of the wrong type; the message names the field.
    """

    preset: str | None = None
    env: str = "echo"
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    sft_data: str | None = None
    # budgets
    sampler: Mapping[str, Any] = field(default_factory=lambda: {"kind": "budgetmix", "ceiling": 4})
    group_budgets: str = "shared"
    notice_format: str = "v1-compact"
    # model
    model_path: str | None = None
    arch: str = "llama"
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    dtype: str = "float32"
    # a Jinja chat template file used instead of the tokenizer's own (a prefix-stable
    # training variant); saved into the trained checkpoint's tokenizer (docs/layout.md)
    chat_template: str | None = None
    # LoRA: true (rank lora_rank, attention projections), peft.LoraConfig kwargs, or a
    # LoraConfig (stored as its kwargs); see budgetmix.training.algorithms.lora
    lora: bool | Mapping[str, Any] = False
    lora_rank: int = 8
    # schedule
    seed: int = 0
    # torch intra-op threads of the run, whatever the machine's cores or OMP_NUM_THREADS
    # (a reduction's summation order depends on it; budgetmix.training.data.reproducibility)
    threads: int = 1
    steps: int = 20
    sft_steps: int = 20
    sft_batch: int = 32
    sft_error_rate: float = 0.0
    groups_per_step: int = 8
    group_size: int = 8
    num_train_seeds: int = 10_000
    # optimisation
    algorithm: str = "grpo"
    lr: float = 3e-4
    sft_lr: float = 3e-3
    weight_decay: float = 0.0
    warmup_steps: int = 0
    lr_decay: str = "none"
    zero_variance: str = "keep"
    token_budget: int | None = None
    max_grad_norm: float = 1.0
    clip_eps: float = 0.2
    clip_eps_high: float | None = None
    kl_coef: float = 0.0
    scale_rewards: bool = True
    ppo_epochs: int = 1
    minibatch_size: int = 64
    # rollouts
    temperature: float = 1.0
    max_new_tokens: int = 8
    max_total_tokens: int = 1024
    rollout_batch_size: int = 256
    token_check: str = "off"
    # output
    output_dir: str = "runs/train"
    save_every: int = 10
    eval_episodes: int = 0
    eval_budgets: tuple[int, ...] | None = None
    progress: bool = True

    def __post_init__(self) -> None:
        for name, low in _INT_MIN.items():
            check_int(f"TrainConfig.{name}", getattr(self, name), minimum=low)
        for name in _POSITIVE_FLOAT:
            check_number(f"TrainConfig.{name}", getattr(self, name), positive=True)
        for name in ("weight_decay", "kl_coef"):
            check_number(f"TrainConfig.{name}", getattr(self, name))
        if self.clip_eps_high is not None:
            check_number("TrainConfig.clip_eps_high", self.clip_eps_high, positive=True)
        check_between("TrainConfig.sft_error_rate", self.sft_error_rate, 0, 1)
        for name, allowed in _CHOICES.items():
            check_choice(f"TrainConfig.{name}", getattr(self, name), allowed)
        check_choice("TrainConfig.notice_format", self.notice_format, NOTICE_FORMATS)
        self._check_env()
        if self.chat_template is not None:
            check_str("TrainConfig.chat_template", self.chat_template, empty=False)
            if not Path(self.chat_template).is_file():
                raise ConfigError(f"TrainConfig.chat_template: no file {self.chat_template!r}")
        object.__setattr__(self, "env_kwargs", dict(self.env_kwargs))
        object.__setattr__(self, "sampler", dict(self.sampler))
        if self.lora is not False:
            from budgetmix.training.algorithms.lora import check_foldable, lora_settings

            object.__setattr__(self, "lora", lora_settings(self.lora))
            if self.sft_steps and self.steps and self.kl_coef > 0:
                check_foldable(self.lora)
        try:
            self.budget_sampler()
        except ConfigError as exc:
            raise ConfigError(f"TrainConfig.sampler: {exc}") from None
        if self.eval_budgets is not None:
            budgets = check_ints("TrainConfig.eval_budgets", tuple(self.eval_budgets), minimum=1)
            object.__setattr__(self, "eval_budgets", budgets)
        if self.token_budget is not None:
            check_int("TrainConfig.token_budget", self.token_budget, minimum=1)
        if self.max_new_tokens >= self.max_total_tokens:
            raise ConfigError("TrainConfig.max_new_tokens must be below max_total_tokens")

    def _check_env(self) -> None:
        from budgetmix.training.envs import resolve_env

        if not isinstance(self.env, str):
            raise ConfigError(f"TrainConfig.env must be a str, got {type(self.env).__name__}")
        try:
            spec = resolve_env(self.env)
        except ConfigError as exc:
            raise ConfigError(f"TrainConfig.{exc}") from None
        if self.sft_data is not None:
            check_str("TrainConfig.sft_data", self.sft_data, empty=False)
        elif spec.demonstrator is None and self.sft_steps:
            raise ConfigError(
                f"TrainConfig.sft_steps must be 0 for env {self.env!r}: it has no scripted "
                "demonstrator to imitate (or give sft_data, recorded episodes to learn from)"
            )

    def chat_template_text(self) -> str | None:
        """The text of the ``chat_template`` file (``None`` without one).

        Raises:
            ConfigError: the file cannot be read as UTF-8 text (the message names it).
        """
        if self.chat_template is None:
            return None
        try:
            return Path(self.chat_template).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(
                f"TrainConfig.chat_template: cannot read {self.chat_template!r}: {exc}"
            ) from None

    def budget_sampler(self) -> BudgetSampler:
        """The sampler ``sampler`` describes (fixed, budgetmix or percentile)."""
        return sampler_from_config(dict(self.sampler))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; ``TrainConfig.from_dict(c.to_dict()) == c``."""
        data = asdict(self)
        data["env_kwargs"] = dict(self.env_kwargs)
        data["sampler"] = dict(self.sampler)
        if self.eval_budgets is not None:
            data["eval_budgets"] = list(self.eval_budgets)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainConfig:
        """Build from a mapping; a ``preset`` key applies that preset under the other keys.

        Raises:
            ConfigError: unknown key, unknown preset or an invalid value.
        """
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown TrainConfig field(s): {', '.join(unknown)}")
        name = data.get("preset")
        base = preset(name) if name is not None else cls()
        try:
            return replace(base, **dict(data))
        except TypeError as exc:  # pragma: no cover - unknown keys are caught above
            raise ConfigError(str(exc)) from None

    def with_overrides(self, **overrides: Any) -> TrainConfig:
        """A validated copy with some fields changed."""
        return TrainConfig.from_dict({**self.to_dict(), **overrides})


#: Named starting points. ``echo-tiny`` learns in seconds on a CPU; ``frozenlake-tiny`` is
#: the paper's FrozenLake at a slip where budgets matter (success_rate 0.8), 4x4 map.
PRESETS: dict[str, dict[str, Any]] = {
    "echo-tiny": {
        "env": "echo",
        "env_kwargs": {"letters": "abcd", "min_len": 1, "max_len": 3},
        "sampler": {"kind": "budgetmix", "ceiling": 4},
        "steps": 20,
        "sft_steps": 30,
        "sft_error_rate": 0.3,
        "groups_per_step": 8,
        "group_size": 8,
        "max_new_tokens": 4,
        "max_total_tokens": 512,
    },
    "echo-tiny-fixed": {
        "env": "echo",
        "env_kwargs": {"letters": "abcd", "min_len": 1, "max_len": 3},
        "sampler": {"kind": "fixed", "turns": 4},
        "steps": 20,
        "sft_steps": 30,
        "sft_error_rate": 0.3,
        "groups_per_step": 8,
        "group_size": 8,
        "max_new_tokens": 4,
        "max_total_tokens": 512,
    },
    "frozenlake-tiny": {
        "env": "frozenlake",
        "env_kwargs": {"map_name": "4x4", "slippery": True, "success_rate": 0.8},
        "sampler": {"kind": "budgetmix", "ceiling": 12},
        "steps": 50,
        "sft_steps": 100,
        "sft_batch": 16,
        "groups_per_step": 4,
        "group_size": 8,
        "max_new_tokens": 8,
        "max_total_tokens": 4096,
        "notice_format": "v1-compact",
    },
}


def preset(name: str, **overrides: Any) -> TrainConfig:
    """The preset ``name`` with ``overrides`` applied.

    Raises:
        ConfigError: unknown preset (the message lists the known ones) or a bad override.
    """
    if name not in PRESETS:
        raise ConfigError(f"preset: unknown preset {name!r}; known: {', '.join(sorted(PRESETS))}")
    values = {**PRESETS[name], **overrides, "preset": name}
    known = {f.name for f in fields(TrainConfig)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"unknown TrainConfig field(s): {', '.join(unknown)}")
    return TrainConfig(**values)


def load_config(path: str | Path) -> TrainConfig:
    """Read a config from a ``.json`` or ``.toml`` file.

    Raises:
        ConfigError: the file is missing, unparsable, or holds an invalid config.
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"config: cannot read {str(p)!r}: {exc}") from None
    try:
        data = tomllib.loads(raw.decode()) if p.suffix == ".toml" else json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config: cannot parse {str(p)!r}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config: {str(p)!r} must hold a table/object")
    return TrainConfig.from_dict(data)
