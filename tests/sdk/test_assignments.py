"""``parse_assignments``: the one parser behind every ``--set FIELD=VALUE`` flag."""

from __future__ import annotations

import pytest
from budgetmix._validate import parse_assignments
from budgetmix.exceptions import ConfigError


def test_values_are_json_and_other_text_is_a_string() -> None:
    got = parse_assignments(
        "--set",
        ["steps=3", "lr=2.5e-4", " name =abc", 'env_kwargs={"hops": 5}', "fr=[0.5, 1]",
         "flag=true", "expr=a=b", "empty="],
    )  # fmt: skip
    assert got == {
        "steps": 3, "lr": 2.5e-4, "name": "abc", "env_kwargs": {"hops": 5},
        "fr": [0.5, 1], "flag": True, "expr": "a=b", "empty": "",
    }  # fmt: skip


def test_a_later_pair_wins() -> None:
    assert parse_assignments("--set", ["seeds=2", "seeds=4"]) == {"seeds": 4}


@pytest.mark.parametrize("pair", ["seeds", "=3", "  =3", ""])
def test_a_pair_without_a_field_is_refused_naming_the_flag(pair: str) -> None:
    with pytest.raises(ConfigError, match=r"^--set: expected FIELD=VALUE"):
        parse_assignments("--set", [pair])
