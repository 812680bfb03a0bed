"""LoRA for training: the user's peft ``LoraConfig``, and the adapter-disabled KL reference.

``TrainConfig.lora`` stays JSON/TOML-serialisable: ``true`` (rank
``lora_rank``, alpha ``2 * lora_rank``, the attention projections), a table of
``peft.LoraConfig`` keyword arguments, or (Python API) a ``LoraConfig`` object,
which :func:`lora_settings` turns into the table of its non-default fields.

With LoRA on, the KL reference is the policy with its adapter disabled
(``PeftModel.disable_adapter()``), not a second copy of the model. So that the
reference is the policy *after* SFT (as without LoRA), :func:`fold_adapter`
merges the SFT adapter into the base weights when RL starts and restarts the
adapter at zero (its ``B`` matrices zeroed; the parameters, and so the
optimizer's references to them, stay the same objects).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from budgetmix._deps import require
from budgetmix.exceptions import ConfigError

__all__ = [
    "DEFAULT_TARGETS",
    "adapter_disabled",
    "apply_lora",
    "check_foldable",
    "fold_adapter",
    "lora_config",
    "lora_settings",
]

#: The modules ``lora=true`` adapts.
DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")

# Fields peft or budgetmix set; a user's config must not.
_RESERVED = (
    "peft_type",
    "auto_mapping",
    "peft_version",
    "base_model_name_or_path",
    "revision",
    "inference_mode",
)


def _jsonable(name: str, value: Any) -> Any:
    """``value`` as JSON data (sets become sorted lists, enums their value)."""
    if isinstance(value, set | frozenset):
        value = sorted(value)
    elif hasattr(value, "value") and isinstance(value.value, str):
        value = value.value
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        raise ConfigError(
            f"TrainConfig.lora.{name}: {value!r} cannot be saved in a JSON/TOML config"
        ) from None
    return value


def lora_settings(value: Any) -> bool | dict[str, Any]:
    """``TrainConfig.lora`` in its stored form: a bool, or the non-default fields of the
    ``LoraConfig`` that ``value`` (a mapping of its keyword arguments, or a ``LoraConfig``)
    describes, always with ``r``, ``lora_alpha`` and ``target_modules``.

    Raises:
        ConfigError: an unknown or reserved field, a value peft refuses, a rank below 1,
            or a value a JSON/TOML config cannot hold (the message names the field).
        MissingExtraError: peft is not installed.
    """
    if isinstance(value, bool):
        return value
    require("peft", "train")
    from peft import LoraConfig

    if isinstance(value, LoraConfig):
        given = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        config = value
    elif isinstance(value, Mapping):
        given = dict(value)
        config = _build(given)
    else:
        raise ConfigError(
            f"TrainConfig.lora must be true/false, a table of peft.LoraConfig fields or a "
            f"LoraConfig, got {type(value).__name__}"
        )
    _check(config)
    default = LoraConfig()
    out: dict[str, Any] = {}
    for f in dataclasses.fields(config):
        current = getattr(config, f.name)
        keep = f.name in ("r", "lora_alpha", "target_modules")
        if f.name not in _RESERVED and (keep or current != getattr(default, f.name)):
            out[f.name] = _jsonable(f.name, current)
    out.pop("task_type", None)  # always CAUSAL_LM (lora_config sets it)
    return out


def _build(kwargs: dict[str, Any]) -> Any:
    from peft import LoraConfig

    known = {f.name for f in dataclasses.fields(LoraConfig)}
    bad = sorted((set(kwargs) - known) | (set(kwargs) & set(_RESERVED)))
    if bad:
        raise ConfigError(
            f"TrainConfig.lora: unknown or reserved LoraConfig field(s) {', '.join(bad)}"
        )
    try:
        return LoraConfig(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"TrainConfig.lora: peft refuses it: {exc}") from None


def _check(config: Any) -> None:
    if isinstance(config.r, bool) or not isinstance(config.r, int) or config.r < 1:
        raise ConfigError(f"TrainConfig.lora.r must be an integer >= 1, got {config.r!r}")
    alpha = config.lora_alpha
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or alpha <= 0:
        raise ConfigError(f"TrainConfig.lora.lora_alpha must be a positive number, got {alpha!r}")
    task = config.task_type
    if task is not None and getattr(task, "value", task) != "CAUSAL_LM":
        raise ConfigError(f"TrainConfig.lora.task_type must be CAUSAL_LM, got {task!r}")
    if config.inference_mode:
        raise ConfigError("TrainConfig.lora.inference_mode must be false: the adapter trains")


def lora_config(settings: bool | Mapping[str, Any], *, rank: int = 8) -> Any:
    """The ``peft.LoraConfig`` of a stored ``TrainConfig.lora`` (``True``: rank ``rank``,
    alpha ``2 * rank``, :data:`DEFAULT_TARGETS`).

    Raises:
        ConfigError: ``settings`` is ``False`` or invalid.
        MissingExtraError: peft is not installed.
    """
    if settings is False:
        raise ConfigError("TrainConfig.lora is off")
    require("peft", "train")
    from peft import LoraConfig

    if settings is True:
        return LoraConfig(
            r=rank, lora_alpha=2 * rank, target_modules=list(DEFAULT_TARGETS), task_type="CAUSAL_LM"
        )
    kwargs = lora_settings(settings)
    assert isinstance(kwargs, dict)
    return LoraConfig(**kwargs, task_type="CAUSAL_LM")


def apply_lora(
    model: Any, config: Any = None, *, rank: int = 8, alpha: int = 16, dropout: float = 0.0
) -> Any:
    """Wrap ``model`` with a peft LoRA adapter: ``config`` (a ``peft.LoraConfig``: its target
    modules, rank, alpha, dropout...) or, without one, rank ``rank`` / ``alpha`` /
    ``dropout`` on the attention projections (:data:`DEFAULT_TARGETS`).

    Raises:
        ConfigError: peft cannot apply it to this model (no module matches, say).
        MissingExtraError: peft is not installed.
    """
    require("peft", "train")
    from peft import LoraConfig, get_peft_model

    if config is None:
        config = LoraConfig(
            r=rank,
            lora_alpha=alpha,
            lora_dropout=dropout,
            target_modules=list(DEFAULT_TARGETS),
            task_type="CAUSAL_LM",
        )

    try:
        return get_peft_model(model, config)
    except ValueError as exc:
        raise ConfigError(f"TrainConfig.lora: cannot apply it to the model: {exc}") from None


@contextmanager
def adapter_disabled(model: Any) -> Iterator[Any]:
    """``model`` with its adapter off and in eval mode (the KL reference), restored after."""
    was_training = model.training
    model.eval()
    try:
        with model.disable_adapter():
            yield model
    finally:
        model.train(was_training)


def check_foldable(settings: bool | Mapping[str, Any]) -> None:
    """Refuse, when RL starts after SFT under a KL term, an adapter :func:`fold_adapter`
    cannot fold: DoRA (its magnitude cannot restart at zero) and ``modules_to_save`` (whole
    module copies, possibly tied to the embeddings).

    Raises:
        ConfigError: naming the field.
    """
    if isinstance(settings, bool):
        return
    for name in ("use_dora", "modules_to_save"):
        if settings.get(name):
            raise ConfigError(
                f"TrainConfig.lora.{name}: with sft_steps and kl_coef > 0 the SFT adapter is "
                "folded into the base when RL starts (the KL reference is the adapter "
                f"disabled), which {name} does not allow; set sft_steps=0 or kl_coef=0"
            )


def fold_adapter(model: Any) -> None:
    """Merge the active LoRA adapter into the base weights and restart it at zero, in place.

    Afterwards the model computes what it computed before, with the adapter on
    or off (see :func:`check_foldable` for what cannot be folded).
    """
    import torch
    from peft.tuners.lora import LoraLayer

    name = model.active_adapter
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, LoraLayer) and name in module.lora_A:
                module.merge(adapter_names=[name])
                module.merged_adapters.remove(name)  # merged into the base: the adapter restarts
                _zero_b(module, name)


def _zero_b(layer: Any, name: str) -> None:
    """Zero the adapter's B side (its delta B @ A is then zero; A keeps its values)."""
    if name in layer.lora_B:
        for p in layer.lora_B[name].parameters():
            p.zero_()
    if name in layer.lora_embedding_B:
        layer.lora_embedding_B[name].zero_()
