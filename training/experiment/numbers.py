"""The experiment's tiny model that can read the turns-left count (issue 29 item 3).

Two parts, both fixed before training:

* the tokenizer writes every integer up to ``max_number`` as one token
  (:func:`~budgetmix.training.rollouts.tokenizer.build_char_tokenizer`), so "5 left" and
  "6 left" differ in one token, not only "9 left" and "10 left" in length;
* the embedding of each number token starts as a **signed thermometer code** of
  its value (:func:`ordinal_embeddings`): coordinate ``d`` is ``+s`` when the value
  exceeds ``d`` and ``-s`` otherwise (values past the code's width saturate). Every
  value has the same norm, neighbours differ in one coordinate, and "more than k
  turns left" is one linear feature for every k, as a pretrained model's number
  sense would give. Without it a freshly initialised token means nothing, and
  counts never seen in SFT (above the ceiling) stay noise.

The masked control's notice writes ``#`` for every number
(``v1-compact-masked``): one character token, never a number token.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from budgetmix.exceptions import ConfigError

__all__ = ["number_model", "ordinal_embeddings"]


def ordinal_embeddings(model: Any, tokenizer: Any, max_number: int, *, scale: float = 2.0) -> int:
    """Overwrite the input embedding of every number token ``0..max_number`` in place.

    The code spans ``min(hidden, max_number)`` coordinates; ``s`` is ``scale`` times
    the standard deviation of the initial embedding matrix. Returns the code width.

    Raises:
        ConfigError: a number that is not one token of ``tokenizer``.
    """
    import torch

    weight = model.get_input_embeddings().weight
    width = min(int(weight.shape[1]), max_number)
    with torch.no_grad():
        s = scale * float(weight.std())
        for n in range(max_number + 1):
            ids = tokenizer.encode(str(n), add_special_tokens=False)
            if len(ids) != 1:
                raise ConfigError(f"max_number: {n} is not one token of this tokenizer")
            code = torch.full((int(weight.shape[1]),), 0.0, dtype=weight.dtype)
            code[:width] = -s
            code[: min(n, width)] = s
            weight[ids[0]] = code
    return width


def number_model(
    path: Path, *, max_number: int, hidden_size: int, num_layers: int, seed: int
) -> Path:
    """Build and save (at ``path``) the untrained tiny model with number tokens.

    The shape is the experiment's (4 heads, 2 KV heads, 4096 positions), seeded
    like the trainer's own tiny model; SFT starts from it.

    Raises:
        ConfigError: a bad shape or ``max_number``.
    """
    from budgetmix.training.data.models import TinyModelSpec, build_tiny_model
    from budgetmix.training.rollouts.tokenizer import build_char_tokenizer

    tokenizer = build_char_tokenizer(max_number=max_number)
    spec = TinyModelSpec(
        hidden_size=hidden_size, num_layers=num_layers, num_heads=4, num_kv_heads=2,
        max_positions=4096,
    )  # fmt: skip
    model = build_tiny_model(spec, tokenizer, seed=seed)
    ordinal_embeddings(model, tokenizer, max_number)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
