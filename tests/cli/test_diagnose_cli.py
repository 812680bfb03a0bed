"""``budgetmix diagnose``: exact step-level comparison, budget curves, recovery injection."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from budgetmix.cli import main


def test_oracle_is_never_worse_than_the_blind_policy(tmp_path: Path) -> None:
    out = tmp_path / "diag.json"
    code = main(
        [
            "diagnose",
            "--a",
            "oracle",
            "--b",
            "blind",
            "--episodes",
            "12",
            "--budgets",
            "4,14",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    data = json.loads(out.read_text())
    quality = data["action_quality"]
    assert quality["b_better"] == 0.0  # the exact optimum is never beaten by exact Q
    assert quality["a_better"] > 0.0  # and the budget changes the best move somewhere
    curve_a = {p["budget"]: p["rate"] for p in data["curves"]["A"]}
    curve_b = {p["budget"]: p["rate"] for p in data["curves"]["B"]}
    assert curve_a[4] > curve_b[4]  # short budgets are where awareness pays
    assert data["recovery"]["A"]["inject_at"] == 2
    assert quality["noise_floor"] == 0.0  # both built-ins are deterministic
    # budget sensitivity at the start cell: the oracle flips at 9/10 turns left, blind never
    sens = data["sensitivity"]
    assert sens["A"]["sensitivity"] == 1.0 and sens["B"]["sensitivity"] == 0.0
    assert sens["A"]["optimal_budgets"] == list(range(4, 10))


def test_bad_budgets_are_a_usage_error() -> None:
    with pytest.raises(SystemExit) as exc:
        main(["diagnose", "--a", "oracle", "--b", "blind", "--budgets", "0,x"])
    assert exc.value.code == 2


def test_bad_budgets_error_is_one_line_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["diagnose", "--a", "oracle", "--b", "blind", "--budgets", "0,x"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("budgetmix diagnose: error: --budgets: "), err


@pytest.mark.parametrize(
    "config_json",
    ['{"model_type": "llama", "garbage": ', "{}"],
    ids=["truncated-config", "no-weights-no-tokenizer"],
)
def test_damaged_checkpoint_is_one_line_naming_the_flag(
    config_json: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A folder that looks like a model but cannot be loaded: exit 2, one line, no traceback."""
    (tmp_path / "config.json").write_text(config_json)
    code = main(["diagnose", "--a", "oracle", "--b", str(tmp_path), "--episodes", "2"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    assert err.count("\n") == 1 and err.startswith("budgetmix diagnose: error: --b: "), err


def _model_dir(path: Path, env: str | None, env_kwargs: dict[str, object]) -> Path:
    """A tiny untrained model directory that records (or not) the env it was trained on."""
    pytest.importorskip("transformers")
    from budgetmix.training.data.models import TinyModelSpec, build_tiny_model
    from budgetmix.training.data.provenance import write_training_env
    from budgetmix.training.rollouts.tokenizer import build_char_tokenizer

    tokenizer = build_char_tokenizer()
    build_tiny_model(TinyModelSpec(), tokenizer, seed=0).save_pretrained(path)
    tokenizer.save_pretrained(path)
    if env is not None:
        write_training_env(path, env, env_kwargs)
    return path


DIAG = ["diagnose", "--a", "oracle", "--episodes", "2", "--budgets", "2"]


def _warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if "warning" in line]


def test_checkpoint_trained_on_another_map_is_named_in_one_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = {"desc": ["SFFF", "FHFH", "FFFH", "HFFG"], "success_rate": 0.8, "demo_gamma": 0.9}
    ckpt = _model_dir(tmp_path, "frozenlake-compact", other)
    assert main([*DIAG, "--b", str(ckpt)]) == 0
    (line,) = _warnings(capsys.readouterr().err)
    assert line.startswith(f"budgetmix diagnose: warning: --b {ckpt} was trained on another")
    assert "desc SFFF,FHFH,FFFH,HFFG (here SFF,HFF,HHG)" in line
    assert "success_rate" not in line  # the slip rate matches


def test_checkpoint_of_this_map_gives_no_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    same = {"desc": ["SFF", "HFF", "HHG"], "success_rate": 0.8, "demo_gamma": 0.9}
    ckpt = _model_dir(tmp_path, "frozenlake-compact", same)
    assert main([*DIAG, "--b", str(ckpt)]) == 0
    assert _warnings(capsys.readouterr().err) == []


def test_checkpoint_without_a_record_is_said_to_be_unchecked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = _model_dir(tmp_path, None, {})
    assert main([*DIAG, "--b", str(ckpt)]) == 0
    (line,) = _warnings(capsys.readouterr().err)
    assert "does not record the environment it was trained on" in line


def test_progress_lines_on_stderr(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from budgetmix.progress import INTERVAL_ENV

    monkeypatch.setenv(INTERVAL_ENV, "0")
    assert main([*DIAG, "--b", "blind", "--budgets", "2,3"]) == 0
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.startswith("diagnose: step ")]
    total = 3 * 2 * 2 + 4 * 2  # B's states and both curves at two budgets, two recoveries
    assert lines and lines[-1].startswith(f"diagnose: step {total}/{total} (100%)")
    assert lines[-1].endswith(", done")
    assert "diagnose: step" not in captured.out  # the tables stay clean
