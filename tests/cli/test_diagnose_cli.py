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
