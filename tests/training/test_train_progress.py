"""A piped training run prints progress lines per phase; its final model names its environment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from budgetmix.manifest import MANIFEST_NAME
from budgetmix.progress import INTERVAL_ENV
from budgetmix.training.config import preset
from budgetmix.training.data.provenance import TRAINING_ENV_FILE, read_training_env
from budgetmix.training.trainer import train

ECHO = {"letters": "a", "min_len": 1, "max_len": 2}
SMALL = {
    "env_kwargs": ECHO,
    "sft_steps": 2,
    "sft_batch": 4,
    "steps": 3,
    "groups_per_step": 2,
    "group_size": 2,
    "progress": True,
}


def test_piped_run_prints_lines_per_phase_and_records_its_env(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(INTERVAL_ENV, "0")  # a line at every step (capsys is not a terminal)
    result = train(preset("echo-tiny", output_dir=str(tmp_path), **SMALL))
    lines = [line for line in capsys.readouterr().out.splitlines() if ": step " in line]
    steps = [line.split(",")[0] for line in lines]
    assert steps == [
        "sft: step 1/2 (50%)",
        "sft: step 2/2 (100%)",
        "rl: step 1/3 (33%)",
        "rl: step 2/3 (66%)",
        "rl: step 3/3 (100%)",
    ]
    assert " left" in lines[0] and lines[-1].endswith(", done")
    final = result.final_model_dir
    assert final is not None
    assert read_training_env(final) == {"env": "echo", "env_kwargs": ECHO}
    assert TRAINING_ENV_FILE in json.loads((final / MANIFEST_NAME).read_text())["files"]


def test_no_lines_when_progress_is_off(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(INTERVAL_ENV, "0")
    train(preset("echo-tiny", output_dir=str(tmp_path), **{**SMALL, "progress": False}))
    assert ": step " not in capsys.readouterr().out
