"""``budgetmix.policies.__all__`` is sorted and complete."""

from __future__ import annotations

import importlib

import budgetmix.policies as policies

FAMILIES = ("accounting", "config", "early_stop", "exhaustion", "extension", "notice", "samplers")


def _isort_key(name: str) -> tuple[int, str]:
    # the order ruff's RUF022 keeps: CONSTANTS, then Classes, then functions
    if name.isupper():
        return (0, name)
    if name[:1].isupper():
        return (1, name)
    return (2, name)


def test_all_is_sorted() -> None:
    assert policies.__all__ == sorted(policies.__all__, key=_isort_key)


def test_all_is_complete() -> None:
    exported = set(policies.__all__)
    for family in FAMILIES:
        module = importlib.import_module(f"budgetmix.policies.{family}")
        missing = set(module.__all__) - exported
        assert not missing, f"{family}: {sorted(missing)} not re-exported"
    public = {n for n in vars(policies) if not n.startswith("_")} - set(FAMILIES)
    assert public == exported
    for name in exported:
        assert getattr(policies, name) is not None
