"""Every command the README prints runs as printed, in order, from a fresh checkout.

The ```bash blocks of README.md are read top to bottom and each ``budgetmix``
command is run in one empty working directory, so a command that needs an
earlier one's output finds it and two that would write the same folder collide
here first. Only flags the command itself documents are appended, to make the
runs small (fewer steps, tasks and samples); none changes where anything is
written. Commands that are not ``budgetmix`` invocations are skipped for the
reason given in :data:`SKIPPED`.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"

#: Commands not run here, by their first words, and why.
SKIPPED = {
    ("bash", "run.sh"): "sets up .venv and runs the whole demo or test suite (this suite is "
    "part of it; tests/cli/test_demo.py runs the demo's --quick mode)",
    ("accelerate", "launch"): "two training processes; tests/training/test_distributed.py runs "
    "the same command line under accelerate",
}

#: Documented flags that shrink a run, appended per subcommand (the last value wins).
SMALL = {
    "train": [
        *("--set", "steps=2", "--set", "sft_steps=4"),
        *("--set", "groups_per_step=1", "--set", "group_size=2", "--no-progress"),
    ],
    "eval": ["--tasks", "2", "-k", "2", "--n-boot", "200", "--no-progress"],
    "report": ["--n-boot", "200"],
}


def readme_commands(text: str) -> list[list[str]]:
    """The commands of the ```bash blocks, in order: continuation lines joined,
    comments dropped, each split as the shell would."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words:
                commands.append(words)
    return commands


def _uses_training(commands: list[list[str]]) -> bool:
    return any(c[:2] == ["budgetmix", "train"] or "checkpoint" in c for c in commands)


def test_commands_are_found_and_every_other_kind_is_accounted_for() -> None:
    commands = readme_commands(README.read_text())
    assert sum(c[0] == "budgetmix" for c in commands) >= 5
    for words in commands:
        if words[0] != "budgetmix":
            assert tuple(words[:2]) in SKIPPED, f"say why {shlex.join(words)!r} is not run"


@pytest.mark.slow
def test_readme_commands_run_in_order_from_a_fresh_checkout(tmp_path: Path) -> None:
    commands = readme_commands(README.read_text())
    if _uses_training(commands):
        pytest.importorskip("torch")
        pytest.importorskip("transformers")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    ran = []
    for words in commands:
        if words[0] != "budgetmix":
            continue
        argv = [sys.executable, "-m", "budgetmix.cli", *words[1:], *SMALL.get(words[1], [])]
        proc = subprocess.run(
            argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, f"{shlex.join(words)}\n{proc.stderr[-3000:]}"
        ran.append(words[1])
    assert {"eval", "report", "train"} <= set(ran)
    # each eval wrote its own folder: none reused an earlier command's results file
    results = sorted(p.parent.name for p in tmp_path.rglob("results.jsonl"))
    assert len(results) == len(set(results)) == ran.count("eval")
