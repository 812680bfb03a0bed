"""The GPU bench's model: a small Qwen2 built from config with a tokenizer made here (no download).

``make_model(dir)`` trains a byte-level BPE locally (tests/training/_layout_fixtures.py,
Qwen2.5's chat template with tools), builds a ``Qwen2ForCausalLM`` with random weights
(hidden 512, 4 layers, 8 heads of 64, 2 KV heads) and saves both with
``save_pretrained`` (bf16), with a ``generation_config`` whose EOS ids are
``<|im_end|>`` and ``<|endoftext|>``. vLLM, transformers and TRL all load that
directory as they would a downloaded Qwen2.5 checkpoint.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

#: The architecture: a public one (Qwen2), sized for a quick GPU bench.
SIZES: dict[str, Any] = {
    "hidden_size": 512,
    "intermediate_size": 1408,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
}


def make_tokenizer(vocab_size: int = 1024) -> Any:
    """A byte-level BPE trained here, with Qwen2.5's special tokens and chat template."""
    sys.path.insert(0, str(ROOT / "tests" / "training"))
    try:
        from _layout_fixtures import build_bpe_tokenizer
    finally:
        sys.path.remove(str(ROOT / "tests" / "training"))
    return build_bpe_tokenizer("qwen", vocab_size=vocab_size)


def make_model(path: Path, *, seed: int = 0, vocab_size: int = 1024) -> Path:
    """Write the tokenizer and a random-weight Qwen2 to ``path``; returns ``path``."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    tokenizer = make_tokenizer(vocab_size)
    ids = tokenizer.convert_tokens_to_ids
    eos = [ids("<|im_end|>"), ids("<|endoftext|>")]
    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=len(tokenizer), eos_token_id=eos[0], **SIZES)
    model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.generation_config = GenerationConfig(
        eos_token_id=eos, pad_token_id=tokenizer.pad_token_id
    )
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
