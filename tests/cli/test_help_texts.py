"""The help texts say what the commands really do by default (issue 34 item 2).

``budgetmix demo --help`` said ``--trace (default: not traced)`` while the demo writes
``traces.jsonl`` unless told otherwise (start_tracing: OTEL_TRACES_EXPORTER, else jsonl).
"""

from __future__ import annotations

import pytest
from budgetmix.cli import main


def _help(command: str, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def test_demo_help_says_it_traces_to_jsonl_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    text = _help("demo", capsys)
    assert "(default: OTEL_TRACES_EXPORTER if set, else jsonl)" in text
    assert "not traced" not in text


def test_train_help_names_resume_and_overwrite(capsys: pytest.CaptureFixture[str]) -> None:
    text = _help("train", capsys)
    assert "--resume" in text and "--overwrite" in text and "is refused" in text
