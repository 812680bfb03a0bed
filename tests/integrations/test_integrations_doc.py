"""docs/integrations.md names, for each framework, the tests that verify it: every test
it names exists in the file it names, and every test file of this group is named."""

from __future__ import annotations

import ast
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
DOC = HERE.parents[1] / "docs" / "integrations.md"


def _tests_in(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    functions = (n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef))
    return {node.name for node in functions if node.name.startswith("test_")}


def _cited() -> dict[str, set[str]]:
    """Test names per file, as the doc's "Tests (`tests/integrations/<file>`): ..." items
    give them (an item runs until the next heading or item)."""
    cited: dict[str, set[str]] = {}
    for item in re.split(r"\n(?=- |#)", DOC.read_text()):
        found = re.search(r"Tests \(`tests/integrations/(test_\w+\.py)`", item)
        if found:
            names = set(re.findall(r"`(test_\w+)`", item))
            cited.setdefault(found.group(1), set()).update(names)
    return cited


def test_every_test_the_doc_names_exists() -> None:
    cited = _cited()
    assert len(cited) >= 7  # one list per framework, MCP included
    missing = {
        file: sorted(names - _tests_in(HERE / file))
        for file, names in cited.items()
        if not (HERE / file).exists() or names - _tests_in(HERE / file)
    }
    assert missing == {}


def test_every_framework_test_file_is_in_the_doc() -> None:
    files = {p.name for p in HERE.glob("test_*.py")} - {Path(__file__).name}
    assert files - set(_cited()) == set()
