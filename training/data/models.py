"""Policy models: any local Hugging Face causal LM by path, or a tiny one built from a config.

Nothing here downloads: ``from_pretrained`` is always called with
``local_files_only=True`` and ``use_safetensors=True``, after the directory's
``manifest.json`` (when it has one) has been verified. Tiny models (a few
layers, hidden size 64) are built from a transformers config and paired with
the char-level tokenizer of :mod:`budgetmix.training.rollouts.tokenizer`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from budgetmix._deps import require
from budgetmix._validate import check_choice, check_int
from budgetmix.adapters.local import load_model
from budgetmix.exceptions import ConfigError

if TYPE_CHECKING:
    from budgetmix.training.config import TrainConfig

__all__ = ["TinyModelSpec", "build_policy", "build_tiny_model", "load_pretrained"]

_ARCHS = ("llama", "qwen2")


@dataclass(frozen=True, slots=True, kw_only=True)
class TinyModelSpec:
    """Shape of a tiny causal LM built from scratch.

    Raises:
        ConfigError: unknown ``arch`` or a non-positive size (message names the field).
    """

    arch: str = "llama"
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 128
    max_positions: int = 2048

    def __post_init__(self) -> None:
        check_choice("TinyModelSpec.arch", self.arch, _ARCHS)
        for name in (
            "hidden_size",
            "num_layers",
            "num_heads",
            "num_kv_heads",
            "intermediate_size",
            "max_positions",
        ):
            check_int(f"TinyModelSpec.{name}", getattr(self, name), minimum=1)
        if self.hidden_size % self.num_heads or self.num_heads % self.num_kv_heads:
            raise ConfigError(
                "TinyModelSpec.num_heads must divide hidden_size and be a multiple of num_kv_heads"
            )


def build_tiny_model(spec: TinyModelSpec, tokenizer: Any, *, seed: int = 0) -> Any:
    """A randomly initialised causal LM of ``spec``'s shape for ``tokenizer``'s vocabulary.

    Initialisation is seeded, so the same seed gives the same weights.

    Raises:
        MissingExtraError: torch/transformers are not installed.
    """
    require("torch", "train")
    require("transformers", "train")
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    common: dict[str, Any] = {
        "vocab_size": len(tokenizer),
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": spec.num_heads,
        "num_key_value_heads": spec.num_kv_heads,
        "max_position_embeddings": spec.max_positions,
        "pad_token_id": tokenizer.pad_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "bos_token_id": None,
        "tie_word_embeddings": True,
    }
    # Seed only model construction, restoring the caller's global RNG afterwards.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if spec.arch == "llama":
            return LlamaForCausalLM(LlamaConfig(**common))
        return Qwen2ForCausalLM(Qwen2Config(**common))


def load_pretrained(path: str | Path, *, dtype: str = "float32") -> tuple[Any, Any]:
    """Load ``(model, tokenizer)`` from a local directory; never downloads, never unpickles.

    :func:`budgetmix.adapters.local.load_model` with ``local_files_only``: a
    directory budgetmix wrote carries a ``manifest.json``; every file it lists
    is verified (size and SHA-256) before anything is loaded. A directory
    without one (a Hugging Face model of your own) loads unverified. Weights
    are read from safetensors only. The tokenizer gets a pad token (its EOS)
    when it has none.

    Raises:
        ConfigError: ``path`` is not a directory, the tokenizer has no chat
            template, or ``dtype`` is unknown.
        CheckpointError: a file is damaged (the message names it) or cannot be loaded.
        MissingExtraError: torch/transformers are not installed.
    """
    if not Path(path).is_dir():
        raise ConfigError(f"model_path {str(path)!r} is not a local directory")
    model, tokenizer = load_model(path, dtype=dtype, local_files_only=True)
    if tokenizer.chat_template is None:
        raise ConfigError(f"tokenizer at {str(path)!r} has no chat template")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def build_policy(config: TrainConfig) -> tuple[Any, Any]:
    """``(model, tokenizer)`` from ``model_path``, or a tiny seeded model + char tokenizer;
    the tokenizer's chat template is ``chat_template``'s file when the config names one."""
    from budgetmix.training.rollouts.tokenizer import build_char_tokenizer

    if config.model_path is not None:
        model, tokenizer = load_pretrained(config.model_path, dtype=config.dtype)
    else:
        tokenizer = build_char_tokenizer()
        spec = TinyModelSpec(
            arch=config.arch,
            hidden_size=config.hidden_size,
            num_layers=config.num_layers,
            num_heads=config.num_heads,
            num_kv_heads=config.num_kv_heads,
            max_positions=max(2048, config.max_total_tokens),
        )
        model = build_tiny_model(spec, tokenizer, seed=config.seed)
    template = config.chat_template_text()
    if template is not None:  # trained with it, and saved with the tokenizer for serving
        tokenizer.chat_template = template
    if config.lora is not False:
        import torch
        from budgetmix.training.algorithms.lora import apply_lora, lora_config

        # the adapter's initial A matrices are random: seeded, so runs repeat
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            model = apply_lora(model, lora_config(config.lora, rank=config.lora_rank))
    return model, tokenizer
