"""The README's quickstart and notice sample are true: they run and print what it says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
QUICKSTART = ROOT / "examples" / "quickstart.py"


def _quickstart_block() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    (quickstart,) = [b for b in blocks if "ep.turns(" in b]
    return str(quickstart)


def test_quickstart_is_the_example_file() -> None:
    assert _quickstart_block() == QUICKSTART.read_text()


def test_quickstart_runs_as_printed(capsys: pytest.CaptureFixture[str]) -> None:
    # nothing injected: the block must define everything it uses
    namespace: dict[str, object] = {"__name__": "__main__"}
    exec(compile(_quickstart_block(), str(README), "exec"), namespace)
    assert capsys.readouterr().out == "success 3 42\n"  # whole turns print as an int


def test_quickstart_example_runs_as_a_script() -> None:
    out = subprocess.run(
        [sys.executable, str(QUICKSTART)], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert out == "success 3 42\n"
    assert "It prints `success 3 42`" in README.read_text()


def test_notice_sample_matches_the_cli() -> None:
    text = README.read_text()
    block = text.split("$ budgetmix notice --turns 4 --tool-calls 6 --all\n", 1)[1].split("```")[0]
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "budgetmix.cli",
            "notice",
            "--turns",
            "4",
            "--tool-calls",
            "6",
            "--all",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out == block
