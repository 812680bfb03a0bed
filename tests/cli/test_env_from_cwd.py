"""``--env module:Class`` resolves from the current folder for the ``budgetmix`` console
script itself (issue 26 item 6), as ``python -m`` does.

docs/training.md's block for a folder that holds only ``user_env.py`` is run as printed,
each command through the installed ``budgetmix`` script (not ``python -m budgetmix.cli``,
which would put the folder on the path by itself), in a fresh temporary folder holding
only a copy of examples/user_env.py, with no ``PYTHONPATH``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "training.md"
MARK = "# a folder that holds only user_env.py"


def _block() -> list[list[str]]:
    for body in re.findall(r"```bash\n(.*?)```", DOC.read_text(), flags=re.S):
        if body.startswith(MARK):
            return [w for line in body.splitlines() if (w := shlex.split(line, comments=True))]
    raise AssertionError(f"docs/training.md has no bash block opening with {MARK!r}")


@pytest.mark.slow
def test_the_console_script_finds_the_users_module_in_the_current_folder(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    script = Path(sys.executable).parent / "budgetmix"
    assert script.is_file(), "the budgetmix console script is installed next to python"
    work = tmp_path / "work"
    work.mkdir()
    (work / "user_env.py").write_text((ROOT / "examples" / "user_env.py").read_text())
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env |= {"OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    commands = _block()
    assert [c[:2] for c in commands] == [["budgetmix", "train"], ["budgetmix", "eval"]]
    assert all("user_env:Counter" in c for c in commands)
    for words in commands:
        assert sorted(p.name for p in work.iterdir() if p.name != "runs") == ["user_env.py"]
        proc = subprocess.run(
            [str(script), *words[1:]], cwd=work, env=env, capture_output=True, text=True,
            timeout=400,
        )  # fmt: skip
        assert proc.returncode == 0, f"{shlex.join(words)}\n{proc.stderr[-2000:]}"
    trained = json.loads((work / "runs/quick/final/training_env.json").read_text())
    assert trained["env"] == "user_env:Counter"
    summary = json.loads((work / "runs/quick-eval/summary.json").read_text())
    assert summary  # the evaluation of the trained checkpoint on the user's environment ran


def test_a_module_missing_here_too_is_still_named(tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "budgetmix"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [str(script), "train", "--env", "no_such_env_module:Counter"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "module 'no_such_env_module' not found" in proc.stderr
