"""A char-level tokenizer with a ChatML-style chat template, built locally in code.

Tiny models trained from scratch (tests, the CPU demo) need a tokenizer that
exists without downloads. One character is one token, so decoding then
re-encoding a sampled response gives back the same ids (the strict
token-continuity check relies on that); characters outside the alphabet map
to ``<unk>``. The result is a regular ``PreTrainedTokenizerFast``: it saves
with ``save_pretrained`` and reloads with ``AutoTokenizer.from_pretrained``.
"""

from __future__ import annotations

from typing import Any

from budgetmix._deps import require

__all__ = ["CHAT_TEMPLATE", "DEFAULT_ALPHABET", "SPECIAL_TOKENS", "build_char_tokenizer"]

#: Pad, end-of-text, role markers and unknown, in id order 0..4.
SPECIAL_TOKENS: tuple[str, ...] = (
    "<|pad|>",
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<unk>",
)
#: Printable ASCII plus newline and tab: everything budget notices and the text envs emit.
DEFAULT_ALPHABET: str = "".join(chr(i) for i in range(32, 127)) + "\n\t"
#: ChatML: ``<|im_start|>{role}\n{content}<|im_end|>\n``; the assistant's EOS is ``<|im_end|>``.
CHAT_TEMPLATE: str = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_char_tokenizer(alphabet: str = DEFAULT_ALPHABET) -> Any:
    """Build a char-level ``PreTrainedTokenizerFast`` with :data:`CHAT_TEMPLATE`.

    ``eos_token`` is ``<|im_end|>`` (ends an assistant turn), ``pad_token`` is
    ``<|pad|>``.

    Raises:
        ConfigError: the alphabet repeats a character or is empty.
        MissingExtraError: ``tokenizers``/``transformers`` are not installed.
    """
    from budgetmix.exceptions import ConfigError

    if not alphabet or len(set(alphabet)) != len(alphabet):
        raise ConfigError("alphabet must be non-empty and not repeat characters")
    require("tokenizers", "train")
    require("transformers", "train")
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate((*SPECIAL_TOKENS, *alphabet))}
    # BPE without merges splits text into single characters: a char-level model.
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens(list(SPECIAL_TOKENS))
    factory: Any = PreTrainedTokenizerFast  # untyped in transformers
    return factory(
        tokenizer_object=backend,
        pad_token="<|pad|>",
        eos_token="<|im_end|>",
        unk_token="<unk>",
        chat_template=CHAT_TEMPLATE,
    )
