"""The size rules the project keeps: no library module over 500 lines, no function over 60."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ("sdk", "evaluation", "adapters", "policies", "training", "gateway", "cli")
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60


def _modules() -> list[Path]:
    return sorted(p for folder in LIBRARY for p in (ROOT / folder).rglob("*.py"))


def test_the_library_has_modules_to_check() -> None:
    assert len(_modules()) > 50


def test_no_module_over_500_lines() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in _modules()
        if (n := p.read_text().count("\n")) > MAX_MODULE_LINES
    }
    assert long == {}


def test_no_function_over_60_lines() -> None:
    long: dict[str, int] = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = length
    assert long == {}
