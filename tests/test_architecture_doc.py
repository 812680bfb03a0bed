"""docs/ARCHITECTURE.md: the recipes name files that exist.

Every path a recipe (or a layer's rule) names in backticks is a file or folder of the
checkout; a new file's name is written ``<name>`` and then its folder must exist, with
at least one sibling of the same kind to copy.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
TOP = ("sdk/", "adapters/", "policies/", "evaluation/", "training/", "gateway/", "cli/",
       "tests/", "docs/", "bench/", "examples/", "scripts/", "pyproject.toml")  # fmt: skip
RECIPES = (
    "a provider SDK",
    "a wire format",
    "a framework integration",
    "an environment",
    "a policy",
    "a notice format",
    "a trace exporter",
)


def _section(title: str) -> str:
    found = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", DOC, re.M | re.S)
    assert found, f"docs/ARCHITECTURE.md has no '## {title}' section"
    return found.group(1)


def _recipes() -> dict[str, str]:
    parts = re.split(r"^### To add (.+)\n", _section("Recipes"), flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def _paths(text: str) -> list[str]:
    return [t for t in re.findall(r"`([^`\s]+)`", text) if t.startswith(TOP)]


def test_every_recipe_is_there_and_names_files() -> None:
    recipes = _recipes()
    assert tuple(recipes) == RECIPES
    for what, body in recipes.items():
        assert len(_paths(body)) >= 2, f"the recipe for {what} names no files"


@pytest.mark.parametrize(
    "path",
    sorted(
        {p for text in (_section("Recipes"), _section("Rules per layer")) for p in _paths(text)}
    ),
)
def test_a_named_file_exists(path: str) -> None:
    if "<" in path:  # a new file: its folder exists, with a sibling of the same kind
        folder, name = path.rsplit("/", 1)
        assert (ROOT / folder).is_dir(), f"{path}: no folder {folder}/"
        pattern = re.sub(r"<[a-z]+>", "*", name)
        assert list((ROOT / folder).glob(pattern)), f"{path}: nothing like it in {folder}/"
    else:
        assert (ROOT / path).exists(), f"{path} is named in docs/ARCHITECTURE.md but missing"
