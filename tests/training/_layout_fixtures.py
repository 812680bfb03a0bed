"""Checkpoints as an ML team has them: a locally trained byte-level BPE, an official chat
template, a tiny Qwen2 / Llama model saved with ``save_pretrained`` (no downloads)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from budgetmix.training.envs.tool_env import ToolEnv, ToolResult, env_tool

TEMPLATES = Path(__file__).parent / "templates"

QWEN_SPECIALS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
)
#: Added (not special) tokens of the Qwen family: kept by decode(skip_special_tokens=True).
QWEN_ADDED = (
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
)
LLAMA_SPECIALS = (
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|python_tag|>",
)
#: Qwen2 / Llama-3 pre-tokenizer: newlines group with the whitespace before them.
SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
CORPUS = [
    "You are a helpful assistant. Call a tool to look up the value of a key.",
    'The tool returned a value. {"name": "lookup", "arguments": {"key": "alpha"}}',
    '{"name": "lookup", "parameters": {"key": "beta"}} {"type": "function"}',
    "Budget (v1): turn 1 of 4, 4 turns left including this one.",
    "Budget (v1): turn 4 of 4, the final turn. Tool calls: 2 of 9 used.",
    "Environment: ipython Cutting Knowledge Date: December 2023 Today Date: 26 Jul 2024",
    "Given the following functions, please respond with a JSON for a function call",
    "# Tools You may call one or more functions to assist with the user query.",
    "value of alpha is 7, value of beta is 11. The answer is 18. Done.",
    "description parameters properties required string object integer",
]


def build_bpe_tokenizer(family: str, vocab_size: int = 700) -> Any:
    """A byte-level BPE trained here on a small corpus, with the family's special tokens."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = QWEN_SPECIALS if family == "qwen" else LLAMA_SPECIALS
    added = QWEN_ADDED if family == "qwen" else ()
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(specials),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    texts = [*CORPUS, *(p.read_text() for p in sorted(TEMPLATES.glob("*.jinja")))]
    backend.train_from_iterator(texts * 3, trainer=trainer)
    factory: Any = PreTrainedTokenizerFast
    if family == "qwen":
        tok = factory(
            tokenizer_object=backend,
            eos_token="<|im_end|>",
            pad_token="<|endoftext|>",
            chat_template=(TEMPLATES / "Qwen-Qwen2.5-7B-Instruct.jinja").read_text(),
        )
        tok.add_tokens(list(added))
    else:
        tok = factory(
            tokenizer_object=backend,
            bos_token="<|begin_of_text|>",
            eos_token="<|end_of_text|>",
            pad_token="<|end_of_text|>",
            chat_template=(TEMPLATES / "meta-llama-Llama-3.1-8B-Instruct.jinja").read_text(),
        )
    return tok


def save_tiny_checkpoint(
    family: str, tokenizer: Any, path: Path, *, seed: int = 0, hidden: int = 32, layers: int = 1
) -> Any:
    """A tiny Qwen2 or Llama model from config (``hidden`` wide, ``layers`` deep), saved with
    ``save_pretrained`` next to ``tokenizer`` (Llama: ``generation_config`` lists three EOS
    ids, as Llama-3.1's does)."""
    import torch
    from transformers import (
        GenerationConfig,
        LlamaConfig,
        LlamaForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    torch.manual_seed(seed)
    sizes: dict[str, Any] = {
        "vocab_size": len(tokenizer),
        "hidden_size": hidden,
        "intermediate_size": 2 * hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "max_position_embeddings": 4096,
    }
    ids = tokenizer.convert_tokens_to_ids
    if family == "qwen":
        model = Qwen2ForCausalLM(Qwen2Config(**sizes, eos_token_id=ids("<|im_end|>")))
        eos: Any = [ids("<|im_end|>"), ids("<|endoftext|>")]
    else:
        model = LlamaForCausalLM(LlamaConfig(**sizes, eos_token_id=ids("<|end_of_text|>")))
        eos = [ids("<|end_of_text|>"), ids("<|eom_id|>"), ids("<|eot_id|>")]
    model.generation_config = GenerationConfig(
        eos_token_id=eos, pad_token_id=tokenizer.pad_token_id
    )
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    (path / "budgetmix_test.json").write_text(json.dumps({"family": family}))
    return model


VALUES = {"alpha": 7, "beta": 11}


class LookupEnv(ToolEnv):
    """Look up two values, then answer their sum."""

    name = "lookup"

    def instructions(self) -> str:
        return "You are a helpful assistant. Call a tool to look up the value of a key."

    def start(self, seed: int) -> str:
        return "What is the value of alpha plus the value of beta?"

    @env_tool
    def lookup(self, key: str) -> str:
        """Look up the value of a key."""
        return f"value of {key} is {VALUES[key]}"

    def reply(self, text: str) -> ToolResult:
        ok = str(sum(VALUES.values())) in text
        return ToolResult(output="ok" if ok else "wrong", done=True, success=ok)
