"""``budgetmix.adapters``: ``__all__`` sorted, complete and importable; the import stays light."""

from __future__ import annotations

import subprocess
import sys
import types

import budgetmix.adapters as adapters


def _ruf022_key(name: str) -> tuple[int, str]:
    return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)


def test_all_is_sorted_unique_and_importable() -> None:
    names = list(adapters.__all__)
    assert names == sorted(names, key=_ruf022_key)
    assert len(names) == len(set(names))
    namespace: dict[str, object] = {}
    exec("from budgetmix.adapters import *", namespace)
    assert set(names) <= set(namespace)


def test_all_is_complete() -> None:
    public = {
        name
        for name, value in vars(adapters).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public <= set(adapters.__all__), public - set(adapters.__all__)


def test_loop_and_doubles_are_exported() -> None:
    for name in ("run_agent", "arun_agent", "AgentRun", "ScriptedModel", "Tool", "LocalChatModel"):
        assert name in adapters.__all__


def test_import_stays_light() -> None:
    code = (
        "import sys, budgetmix.adapters; "
        "print(','.join(m for m in ('torch', 'transformers', 'openai', 'anthropic') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == ""
