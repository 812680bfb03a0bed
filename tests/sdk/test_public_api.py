"""The public surface: ``budgetmix.__all__`` is sorted, complete and importable."""

from __future__ import annotations

import subprocess
import sys
import types

import budgetmix


def _isort_key(name: str) -> tuple[int, str]:
    """The order ruff's RUF022 keeps: CONSTANTS, then Classes, then everything else."""
    if name.isupper():
        return (0, name)
    if name[0].isupper():
        return (1, name)
    return (2, name)


def test_all_is_sorted_and_unique() -> None:
    names = list(budgetmix.__all__)
    assert names == sorted(names, key=_isort_key)
    assert len(names) == len(set(names))


def test_every_name_in_all_is_importable() -> None:
    for name in budgetmix.__all__:
        assert getattr(budgetmix, name) is not None, name
    namespace: dict[str, object] = {}
    exec("from budgetmix import *", namespace)
    assert set(budgetmix.__all__) <= set(namespace)


def test_all_is_complete() -> None:
    public = {
        name
        for name, value in vars(budgetmix).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public <= set(budgetmix.__all__), public - set(budgetmix.__all__)


def test_core_names_are_exported() -> None:
    for name in (
        "AccountingPolicy",
        "Budget",
        "BudgetController",
        "BudgetExhausted",
        "ConfigError",
        "DEFAULT_ACCOUNTING",
        "Episode",
        "EpisodeResult",
        "EpisodeStatus",
        "Hooks",
        "Ledger",
        "LedgerState",
        "Mistake",
        "MistakeKind",
        "NOTICE_FORMATS",
        "Recovery",
        "RetryPolicy",
        "current_episode",
        "render_notice",
        "with_notice_anthropic",
        "with_notice_openai_chat",
        "with_notice_openai_responses",
    ):
        assert name in budgetmix.__all__, name


def test_import_stays_light() -> None:
    code = (
        "import sys, budgetmix; "
        "print(','.join(m for m in ('torch', 'transformers', 'openai', 'anthropic', "
        "'gymnasium') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == ""
