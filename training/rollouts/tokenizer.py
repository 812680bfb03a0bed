"""A char-level tokenizer with a ChatML-style chat template, built locally in code.

Tiny models trained from scratch (tests, the CPU demo) need a tokenizer that
exists without downloads. One character is one token, so decoding then
re-encoding a sampled response gives back the same ids (the strict
token-continuity check relies on that); characters outside the alphabet map
to ``<unk>``. The result is a regular ``PreTrainedTokenizerFast``: it saves
with ``save_pretrained`` and reloads with ``AutoTokenizer.from_pretrained``.

``max_number`` > 9 makes every integer ``0..max_number`` **one token per value**
(issue 29): with digits alone a small model can tell ``9 left`` from ``10 left``
only by the notice's length, so a budget decision between two counts with the same
number of digits (5 vs 6 left) cannot be learned. The notice text is unchanged;
the masked control's notice (``v1-compact-masked``) writes :data:`MASK_TOKEN` for
every number, so every value maps to that one token. A longer digit run is split
greedily (``123`` with ``max_number=99`` is ``12`` ``3``); a reply sampled as two
digit tokens that together spell a number token re-encodes as that one token.
"""

from __future__ import annotations

from typing import Any

from budgetmix._deps import require

__all__ = [
    "CHAT_TEMPLATE",
    "DEFAULT_ALPHABET",
    "MASK_TOKEN",
    "SPECIAL_TOKENS",
    "build_char_tokenizer",
]

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
#: What the masked notice writes for every number: one character, so one token.
MASK_TOKEN: str = "#"
#: ChatML: ``<|im_start|>{role}\n{content}<|im_end|>\n``; the assistant's EOS is ``<|im_end|>``.
CHAT_TEMPLATE: str = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_char_tokenizer(alphabet: str = DEFAULT_ALPHABET, *, max_number: int = 9) -> Any:
    """Build a char-level ``PreTrainedTokenizerFast`` with :data:`CHAT_TEMPLATE`.

    ``eos_token`` is ``<|im_end|>`` (ends an assistant turn), ``pad_token`` is
    ``<|pad|>``. ``max_number`` (9: plain char-level) > 9 adds the integers
    ``10..max_number`` as one token each (ids after the alphabet's), so every count
    up to it is one token (see the module notes).

    Raises:
        ConfigError: the alphabet repeats a character or is empty, lacks a digit
            while ``max_number`` > 9, or ``max_number`` is not an integer in 9..9999.
        MissingExtraError: ``tokenizers``/``transformers`` are not installed.
    """
    from budgetmix._validate import check_int
    from budgetmix.exceptions import ConfigError

    if not alphabet or len(set(alphabet)) != len(alphabet):
        raise ConfigError("alphabet must be non-empty and not repeat characters")
    check_int("max_number", max_number, minimum=9, maximum=9999)
    if max_number > 9 and not set("0123456789") <= set(alphabet):
        raise ConfigError("max_number: number tokens need every digit in the alphabet")
    require("tokenizers", "train")
    require("transformers", "train")
    from tokenizers import AddedToken, Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate((*SPECIAL_TOKENS, *alphabet))}
    # BPE without merges splits text into single characters: a char-level model.
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens(list(SPECIAL_TOKENS))
    # added tokens match leftmost-longest before the char-level model runs
    backend.add_tokens([AddedToken(str(i), normalized=False) for i in range(10, max_number + 1)])
    factory: Any = PreTrainedTokenizerFast  # untyped in transformers
    return factory(
        tokenizer_object=backend,
        pad_token="<|pad|>",
        eos_token="<|im_end|>",
        unk_token="<unk>",
        chat_template=CHAT_TEMPLATE,
    )
