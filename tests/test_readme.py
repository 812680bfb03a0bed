"""The README's quickstart and notice sample are true: they run and print what it says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

README = Path(__file__).resolve().parents[1] / "README.md"


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_quickstart_runs_and_finishes_within_budget(capsys: Any) -> None:
    quickstart = next(b for b in _python_blocks(README.read_text()) if "ep.turns(" in b)

    def llm(messages: list[dict[str, str]]) -> dict[str, Any]:
        # answers once two search results are in the conversation
        results = sum(1 for m in messages if m["content"].startswith("results"))
        return {"content": "42"} if results >= 2 else {"tool": "search", "args": {"q": "x"}}

    def search(q: str) -> str:
        return f"results for {q}"

    namespace: dict[str, Any] = {"llm": llm, "search": search}
    exec(compile(quickstart, str(README), "exec"), namespace)
    assert capsys.readouterr().out.split() == ["success", "3", "42"]


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
