"""A fresh ``budgetmix train`` never deletes a run it finds in its output folder silently.

On the code before, a fresh run into a folder holding a run unlinked the old
``metrics.jsonl`` without a word. Now it is refused with one line naming both ways
on (``--resume``, ``--overwrite``); ``--overwrite`` deletes the old run's files and
starts afresh; the two flags together are refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from budgetmix.cli import main

SMALL = ["--no-progress", "--set", "steps=1", "--set", "sft_steps=1", "--set", "sft_batch=2"]
SMALL += ["--set", "groups_per_step=2", "--set", "group_size=2"]


def _old_run(out: Path) -> None:
    out.mkdir()
    (out / "metrics.jsonl").write_text('{"step": 0, "old": true}\n')
    (out / "checkpoint").mkdir()
    (out / "checkpoint" / "state.json").write_text('{"step": 7}')


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("leftover", ["metrics.jsonl", "checkpoint", "final"])
def test_a_fresh_run_into_a_run_folder_is_refused_naming_the_flags(
    tmp_path: Path, leftover: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    out.mkdir()
    kept = out / leftover
    if leftover.endswith(".jsonl"):
        kept.write_text('{"step": 0}\n')
    else:
        kept.mkdir()
    argv = ["train", "--preset", "echo-tiny", "--output-dir", str(out), *SMALL]
    assert main(argv) == 2
    line = _error_line(capsys)
    assert line.startswith("budgetmix train: error: --output-dir: ")
    assert f"already holds a run ({leftover})" in line
    assert "--resume" in line and "--overwrite" in line
    assert kept.exists()  # nothing was deleted
    assert sorted(p.name for p in out.iterdir()) == [leftover]


def test_resume_and_overwrite_together_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["train", "--preset", "echo-tiny", "--resume", "--overwrite"]
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert _error_line(capsys).startswith("budgetmix train: error: --overwrite: ")


@pytest.mark.slow
def test_overwrite_starts_afresh(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("transformers")
    out = tmp_path / "run"
    _old_run(out)
    argv = ["train", "--preset", "echo-tiny", "--output-dir", str(out), "--overwrite", *SMALL]
    assert main(argv) == 0
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [0, 1] and not any("old" in s for s in steps)
    state = json.loads((out / "checkpoint" / "state.json").read_text())
    assert state["step"] == 2  # the new run's checkpoint, not the old step 7
    assert (out / "final" / "model.safetensors").is_file()
