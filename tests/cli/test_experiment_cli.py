"""``budgetmix experiment --preset NAME`` (issue 34 item 4): any preregistered design from the
command line, into its own folder, and the same command resumes.

The other experiment rows (``tools``, ``full-map2``) could only be run from the Python
API before. Bad flags are one line naming the flag; a rerun reuses the SFT base and
every finished RL run (their files are not written again).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from budgetmix.cli import main
from budgetmix.cli.experiment import DESIGN_PRESETS
from budgetmix.training.experiment import EXPERIMENT_PRESETS


def _one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    try:
        code: object = main(argv)
    except SystemExit as exc:
        code = exc.code
    assert code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in lines[0], lines
    return lines[0]


def test_every_preset_is_offered_and_the_designs_exist() -> None:
    assert set(DESIGN_PRESETS) <= set(EXPERIMENT_PRESETS)
    assert {"default", "full", "tools", "full-map2", "confirm"} <= set(EXPERIMENT_PRESETS)


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--preset", "huge"], "--preset"),
        (["--preset", "tools", "--set", "bogus=1"], "--set"),
        (["--preset", "tools", "--set", "seeds"], "--set"),
        (["--preset", "confirm"], "--error-rate"),
        (["--preset", "confirm", "--error-rate", "1.5"], "--error-rate"),
        (["--preset", "confirm", "--error-rate", "0.3", "--bases", "0"], "--bases"),
        ([], "--preset"),
    ],
)
def test_bad_flags_are_one_line_naming_the_flag(
    argv: list[str], flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _one_line(["experiment", *argv, "--out", str(tmp_path / "x")], capsys)
    assert line.startswith(f"budgetmix experiment: error: {flag}"), line
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_a_preset_runs_into_its_folder_and_the_rerun_reuses_what_finished(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("transformers")
    out = tmp_path / "exp"
    argv = ["experiment", "--preset", "ci", "--out", str(out), "--no-progress"]
    argv += ["--set", "seeds=1", "--set", "methods=[\"fixed\", \"budgetmix\"]"]
    for small in ("sft_steps=4", "rl_steps=2", "eval_episodes=2", "val_episodes=2"):
        argv += ["--set", small]  # the structure, not the numbers
    argv += ["--set", "sens_episodes=2", "--set", "diag_episodes=2", "--set", "diag_samples=1"]
    argv += ["--set", "eval_fractions=[0.5, 1.0]", "--set", "pass_ks=[1]"]
    assert main(argv) == 0
    said = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert said["preset"] == "ci" and said["out"] == str(out)
    assert Path(said["files"]["report"]).is_file() and (out / "summary.json").is_file()
    trained = sorted(out.glob("runs/*/final/model.safetensors"))
    assert [p.parts[-3] for p in trained] == ["base", "budgetmix-s0", "fixed-s0"]
    stamps = {p: p.stat().st_mtime_ns for p in trained}
    assert main(argv) == 0  # resumes: nothing trained again
    assert {p: p.stat().st_mtime_ns for p in trained} == stamps
