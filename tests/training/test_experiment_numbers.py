"""The experiment's number-reading model: one token per count, an ordinal code per token."""

from __future__ import annotations

from pathlib import Path

import pytest
from budgetmix.exceptions import ConfigError

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


def _codes(model: object, tokenizer: object, top: int) -> list[object]:
    weight = model.get_input_embeddings().weight  # type: ignore[attr-defined]
    return [weight[tokenizer.encode(str(n), add_special_tokens=False)[0]] for n in range(top + 1)]  # type: ignore[attr-defined]


def test_thermometer_code_makes_every_threshold_one_linear_feature(tmp_path: Path) -> None:
    from budgetmix.training.data.models import load_pretrained
    from budgetmix.training.experiment.numbers import number_model

    path = number_model(tmp_path / "init", max_number=40, hidden_size=32, num_layers=1, seed=0)
    model, tokenizer = load_pretrained(path)  # the code is saved with the model
    codes = _codes(model, tokenizer, 40)
    norms = {round(float(c.norm()), 5) for c in codes}
    assert len(norms) == 1  # every value the same norm: no magnitude cue
    for n in range(32):  # neighbours differ in exactly one coordinate
        assert int((codes[n] != codes[n + 1]).sum()) == 1
    for k in range(1, 33):  # "more than k-1 left" is the sign of coordinate k-1
        assert all((float(codes[n][k - 1]) > 0) == (n >= k) for n in range(41))
    assert torch.equal(codes[32], codes[40])  # past the code's width (hidden 32): saturated
    # the masked notice's "#" is a char token the code leaves alone
    mask = tokenizer.encode("#", add_special_tokens=False)
    hash_code = model.get_input_embeddings().weight[mask[0]]
    assert len(mask) == 1 and not any(torch.equal(hash_code, c) for c in codes)


def test_ordinal_embeddings_need_number_tokens() -> None:
    from budgetmix.training.data.models import TinyModelSpec, build_tiny_model
    from budgetmix.training.experiment.numbers import ordinal_embeddings
    from budgetmix.training.rollouts.tokenizer import build_char_tokenizer

    chars = build_char_tokenizer()  # digits only: 10 is two tokens
    model = build_tiny_model(TinyModelSpec(hidden_size=16, num_layers=1), chars)
    with pytest.raises(ConfigError, match="10 is not one token"):
        ordinal_embeddings(model, chars, 12)
    assert ordinal_embeddings(model, chars, 9) == 9  # 0..9 are single characters
