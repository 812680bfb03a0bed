"""The tiny LM's number tokens (issue 29 item 3): one token per turns-left value.

The char-level tokenizer gives a count as its digits, so a model can tell "9 left"
from "10 left" only by length; with ``max_number`` every count up to it is one
token, the notice text is unchanged, and the masked notice puts one mask token
where every value was.
"""

from __future__ import annotations

import pytest
from budgetmix.budget import Budget
from budgetmix.exceptions import ConfigError
from budgetmix.ledger import Ledger
from budgetmix.notice import render_notice
from budgetmix.training.rollouts.tokenizer import MASK_TOKEN, build_char_tokenizer

pytest.importorskip("tokenizers")
pytest.importorskip("transformers")


def _notice(total: int, turn: int, fmt: str = "v1-compact") -> str:
    ledger = Ledger(Budget(turns=total), clock=lambda: 0.0)
    for _ in range(turn + 1):  # turn 0 is the first: charged as it starts
        ledger.try_charge_turn()
    return render_notice(ledger.state(in_turn=True), fmt)


def _ids(tok: object, text: str) -> list[int]:
    return list(tok.encode(text, add_special_tokens=False))  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def numbers() -> object:
    return build_char_tokenizer(max_number=99)


def test_every_turns_left_value_is_one_distinct_token(numbers: object) -> None:
    ids = {}
    for left in range(2, 100):
        text = _notice(left, 0)  # the first turn: turns left == the budget
        assert text.endswith(f", {left} left")
        toks = numbers.convert_ids_to_tokens(_ids(numbers, text))  # type: ignore[attr-defined]
        assert toks[-7:] == [" ", str(left), " ", "l", "e", "f", "t"]
        ids[left] = _ids(numbers, f"{left}")
        assert len(ids[left]) == 1, left
        assert numbers.decode(_ids(numbers, text)) == text  # type: ignore[attr-defined]
    assert len({tuple(v) for v in ids.values()}) == len(ids)  # injective: every value its own


def test_char_level_tokenizer_splits_two_digit_counts() -> None:
    """The old tokenizer (the default ``max_number=9``): 10..99 are two tokens, so the
    tests above fail on it."""
    chars = build_char_tokenizer()
    assert all(len(_ids(chars, str(v))) == 2 for v in range(10, 100))
    assert all(len(_ids(chars, str(v))) == 1 for v in range(10))


def test_the_notice_text_is_unchanged_and_longer_runs_split_greedily(numbers: object) -> None:
    text = _notice(14, 3)
    assert text == "[budget v1c] turn 4/14, 11 left"  # the SDK's bytes, nothing added
    toks = numbers.convert_ids_to_tokens(_ids(numbers, text))  # type: ignore[attr-defined]
    assert toks[-11:] == ["4", "/", "14", ",", " ", "11", " ", "l", "e", "f", "t"]
    assert "".join(toks) == text
    assert numbers.convert_ids_to_tokens(_ids(numbers, "1234")) == ["12", "34"]  # type: ignore[attr-defined]


def test_masked_notice_maps_every_value_to_one_mask_token(numbers: object) -> None:
    masked = {tuple(_ids(numbers, _notice(t, k, "v1-compact-masked"))) for t in range(2, 40)
              for k in range(t)}  # fmt: skip
    assert len(masked) == 1  # no value reaches the masked arm
    (masked_ids,) = masked
    mask_id = _ids(numbers, MASK_TOKEN)
    assert len(mask_id) == 1
    for total, turn in ((14, 0), (37, 5), (7, 3)):
        plain = _ids(numbers, _notice(total, turn))
        assert len(plain) == len(masked_ids)  # value for value, one token each
        differ = [i for i, (a, b) in enumerate(zip(plain, masked_ids, strict=True)) if a != b]
        assert [masked_ids[i] for i in differ] == mask_id * 3  # turn, total, left


def test_number_tokens_survive_save_and_reload(numbers: object, tmp_path: object) -> None:
    from transformers import AutoTokenizer

    numbers.save_pretrained(str(tmp_path))  # type: ignore[attr-defined]
    again = AutoTokenizer.from_pretrained(str(tmp_path))
    text = _notice(21, 2)
    assert _ids(again, text) == _ids(numbers, text)
    assert len(again) == len(numbers)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [5, -1, 10_000, 12.0, True])
def test_bad_max_number_is_refused_with_its_name(bad: object) -> None:
    with pytest.raises(ConfigError, match="max_number"):
        build_char_tokenizer(max_number=bad)  # type: ignore[arg-type]


def test_number_tokens_need_the_digits() -> None:
    with pytest.raises(ConfigError, match="max_number"):
        build_char_tokenizer("abc", max_number=20)
