"""Every budgetmix.* attribute, event and metric name lives in budgetmix.semconv."""

from __future__ import annotations

import ast
from pathlib import Path

import budgetmix
from budgetmix import semconv

ROOT = Path(budgetmix.__file__).resolve().parent


def test_all_is_sorted_and_complete() -> None:
    names = {n for n in vars(semconv) if n.isupper() or n.startswith("bm_")}
    assert set(semconv.__all__) == names
    assert list(semconv.__all__) == sorted(semconv.__all__, key=lambda n: (n[0].islower(), n))


def test_budgetmix_names_are_in_their_namespace() -> None:
    for name in semconv.__all__:
        value = getattr(semconv, name)
        if name.startswith("BM_"):
            assert value.startswith("budgetmix."), name
        elif name.startswith("GEN_AI_"):
            assert value.startswith("gen_ai."), name


def _budgetmix_literals(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if text.startswith("budgetmix.") and " " not in text and "\n" not in text:
                found.append(text)
    return found


def test_the_writers_of_spans_and_metrics_spell_no_name_themselves() -> None:
    """The modules that write spans, events and metrics (and the accounting attributes)
    take every ``budgetmix.*`` name from semconv; logger names are not attributes."""
    writers = ["instrumentation.py", "episode.py", "steps.py", "controller.py", "accounting.py"]
    for name in writers:
        assert _budgetmix_literals(ROOT / name) == [], name
