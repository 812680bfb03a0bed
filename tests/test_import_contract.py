"""The import contract (`[tool.importlinter]`): the tree keeps it, upward imports break it.

Each violation is injected into a copy of the installed package, so the check
proves the contract catches it (function-level and TYPE_CHECKING-only imports
count), not only that today's tree happens to pass.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("importlinter")

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def _copy_package(dest: Path) -> Path:
    spec = importlib.util.find_spec("budgetmix")
    assert spec is not None and spec.submodule_search_locations
    src = Path(next(iter(spec.submodule_search_locations)))
    shutil.copytree(src, dest / "budgetmix", ignore=shutil.ignore_patterns("__pycache__"))
    return dest / "budgetmix"


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    code = "from importlinter.cli import lint_imports_command; lint_imports_command()"
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [sys.executable, "-c", code, "--config", str(PYPROJECT), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_tree_keeps_the_contract(tmp_path: Path) -> None:
    _copy_package(tmp_path)
    proc = _lint(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 kept, 0 broken" in proc.stdout


# (module file in the package, text appended, the line the report must show)
VIOLATIONS = {
    "core imports training in a function": (
        "semconv.py",
        "\n\ndef _probe() -> None:\n    from budgetmix.training import envs  # noqa: F401\n",
        "budgetmix.semconv -> budgetmix.training.envs",
    ),
    "core imports adapters for typing only": (
        "semconv.py",
        "\nfrom typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
        "    from budgetmix.adapters import base  # noqa: F401\n",
        "budgetmix.semconv -> budgetmix.adapters.base",
    ),
    "evaluation imports its sibling adapters": (
        "evaluation/metrics.py",
        "\nimport budgetmix.adapters.base  # noqa: E402,F401\n",
        "budgetmix.evaluation.metrics -> budgetmix.adapters.base",
    ),
    "training imports the commands": (
        "training/toy.py",
        "\nimport budgetmix.cli  # noqa: E402,F401\n",
        "budgetmix.training.toy -> budgetmix.cli",
    ),
    "policies import evaluation": (
        "policies/notice.py",
        "\nimport budgetmix.evaluation.passk  # noqa: E402,F401\n",
        "budgetmix.policies.notice -> budgetmix.evaluation.passk",
    ),
    "rollouts import the trainer in a function": (
        "training/rollouts/sampler.py",
        "\n\ndef _probe() -> None:\n    from budgetmix.training import trainer  # noqa: F401\n",
        "budgetmix.training.rollouts.sampler -> budgetmix.training.trainer",
    ),
    "diagnostics import their sibling data": (
        "training/diagnostics/stats.py",
        "\nimport budgetmix.training.data.checkpoint  # noqa: E402,F401\n",
        "budgetmix.training.diagnostics.stats -> budgetmix.training.data.checkpoint",
    ),
    "environments import the rollouts at run time": (
        "training/envs/mdp.py",
        "\nimport budgetmix.training.rollouts.chat  # noqa: E402,F401\n",
        "budgetmix.training.envs.mdp -> budgetmix.training.rollouts.chat",
    ),
    "the root package imports policies": (
        "__init__.py",
        "\nimport budgetmix.policies  # noqa: E402,F401\n",
        "budgetmix -> budgetmix.policies",
    ),
}


@pytest.mark.parametrize("case", list(VIOLATIONS))
def test_an_upward_import_breaks_the_contract(case: str, tmp_path: Path) -> None:
    target, text, reported = VIOLATIONS[case]
    package = _copy_package(tmp_path)
    with (package / target).open("a") as f:
        f.write(text)
    proc = _lint(tmp_path)
    assert proc.returncode != 0, proc.stdout
    assert "BROKEN" in proc.stdout and reported in proc.stdout, proc.stdout


@pytest.mark.parametrize("where", [".", "training"])
def test_a_module_the_contract_does_not_place_breaks_it(where: str, tmp_path: Path) -> None:
    package = _copy_package(tmp_path)
    (package / where / "unplaced.py").write_text('"""A new module nobody placed in a layer."""\n')
    proc = _lint(tmp_path)
    assert proc.returncode != 0, proc.stdout
    name = "budgetmix.unplaced" if where == "." else "budgetmix.training.unplaced"
    assert name in proc.stdout, proc.stdout
