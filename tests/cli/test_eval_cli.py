"""``eval_main`` / ``report_main``: flags, config files, resume, report rebuild and compare."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from budgetmix.cli.eval import eval_main, report_main
from budgetmix.evaluation import read_results

FLAGS = [
    "--env",
    "faulty_tools",
    "--tasks",
    "3",
    "--budgets",
    "2,4,6",
    "-k",
    "2",
    "--agent",
    "noisy",
    "--noise",
    "0.3",
    "--no-progress",
    "--n-boot",
    "50",
]


def test_eval_flags_then_rerun_does_no_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    assert eval_main([*FLAGS, "--out", str(out), "--no-plots"]) == 0
    text = capsys.readouterr().out
    assert "| T | episodes | pass@1 | pass@2 |" in text
    records = read_results(out / "results.jsonl").records
    assert len(records) == 3 * 3 * 2
    assert {r.task_id for r in records} == {"faulty_tools-0", "faulty_tools-1", "faulty_tools-2"}
    # the faulty-tools oracle never reads its budget: one live run per (task, sample)
    assert sum(r.derived for r in records) == 3 * 2 * 2
    assert (out / "summary.json").exists() and (out / "report.md").exists()
    assert eval_main([*FLAGS, "--out", str(out), "--no-plots"]) == 0
    assert "0 episodes run, 0 derived by prefix sharing, 18 already done" in capsys.readouterr().out


def test_eval_from_toml_config_with_plots(tmp_path: Path) -> None:
    cfg = tmp_path / "eval.toml"
    cfg.write_text(
        'env = "faulty_tools"\nenv_kwargs = { hops = 2 }\nseeds = [3, 4]\nbudgets = [3, 5]\n'
        'samples = 2\nagent = "oracle"\nfault-step = 1\nno_progress = true\nn_boot = 50\n'
        f'out = "{tmp_path / "out"}"\n'
    )
    assert eval_main(["--config", str(cfg), "--concurrency", "2"]) == 0
    for name in ("pass_kt_heatmap.png", "success_vs_budget.png", "cost_curves.png"):
        assert (tmp_path / "out" / name).stat().st_size > 1000
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["header"]["identity"]["fault_step"] == 1
    assert all(c["recovery"]["fault"]["episodes_reached"] == 4 for c in summary["cells"])


def test_bad_config_returns_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert eval_main(["--env", "nope", "--budgets", "2", "--no-progress"]) == 2
    assert "unknown environment" in capsys.readouterr().err
    assert eval_main(["--env", "faulty_tools", "--no-progress"]) == 2
    bad = tmp_path / "c.json"
    bad.write_text('{"env": "faulty_tools", "budgets": [2], "colour": "red"}')
    assert eval_main(["--config", str(bad)]) == 2
    assert "unknown keys ['colour']" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        eval_main(["--help"])
    assert exc.value.code == 0


def test_report_rebuild_and_compare(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    assert eval_main([*FLAGS, "--out", str(a), "--no-plots"]) == 0
    assert eval_main([*FLAGS, "--out", str(b), "--no-plots", "--seed", "9"]) == 0
    capsys.readouterr()
    assert (
        report_main([str(a / "results.jsonl"), "--out", str(tmp_path / "rep"), "--n-boot", "50"])
        == 0
    )
    assert (tmp_path / "rep" / "pass_kt_heatmap.png").exists()
    assert (
        report_main(
            [
                str(a / "results.jsonl"),
                "--compare",
                str(b / "results.jsonl"),
                "--labels",
                "fixed,budgetmix",
                "--out",
                str(tmp_path / "cmp"),
                "--no-plots",
                "--n-boot",
                "50",
            ]
        )
        == 0
    )
    assert "| T | fixed | budgetmix | budgetmix - fixed | paired |" in capsys.readouterr().out
    assert report_main([str(tmp_path / "missing.jsonl")]) == 2


def test_damaged_local_model_is_one_line_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--model`` that looks like a model folder but cannot be loaded: exit 2, one line."""
    pytest.importorskip("transformers")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama", "garbage": ')
    argv = ["--env", "frozenlake", "--budgets", "4", "--agent", "local", "--model", str(model)]
    code = eval_main([*argv, "--out", str(tmp_path / "ev"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    assert err.count("\n") == 1 and err.startswith("budgetmix eval: error: --model: "), err


def test_bad_values_are_one_line_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's examples for ``eval``: ``--env-kwargs '[1]'`` and ``'5'``."""
    for value in ("[1]", "5"):
        with pytest.raises(SystemExit) as exc:
            eval_main(["--env", "frozenlake", "--budgets", "4", "--env-kwargs", value])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("budgetmix eval: error: --env-kwargs: ")


def test_piped_eval_prints_progress_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Output to a pipe (capsys is not a terminal) gets ``eval:`` lines, ending ``done``."""
    monkeypatch.setenv("BUDGETMIX_PROGRESS_INTERVAL", "1000")
    flags = [f for f in FLAGS if f != "--no-progress"]
    assert eval_main([*flags, "--out", str(tmp_path / "run"), "--no-plots"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("eval: ")]
    # the interval is long, so only the closing line is due: all 3 x 3 x 2 records done
    assert len(lines) == 1 and lines[0].startswith("eval: step 18/18 (100%)")
    assert lines[0].endswith("done")
