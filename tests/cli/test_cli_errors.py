"""Every command-line error is one line on stderr naming the flag, exit status 2, no traceback.

One test per example of issue 14 (and the flags of the same kind next to them). Errors
that argparse itself finds end in ``SystemExit(2)``; errors the validation layer finds
make ``main`` return 2. Through the ``budgetmix`` script both are exit status 2, which
the subprocess test checks end to end.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from budgetmix.cli import main


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[object, str]:
    """``(exit status, stderr)`` of ``budgetmix ARGV`` run in this process."""
    try:
        code: object = main(argv)
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr().err


def assert_flag_error(code: object, err: str, command: str, flag: str) -> None:
    """Exit status 2 and exactly one stderr line ``budgetmix CMD: error: FLAG: ...``."""
    assert code == 2, err
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"budgetmix {command}: error: {flag}: "), lines[0]


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--turns", "0"], "--turns"),
        (["--turns", "-3"], "--turns"),
        (["--turns", "x"], "--turns"),
        (["--turns", "3", "--turn", "4"], "--turn"),
        (["--tool-calls", "0"], "--tool-calls"),
        (["--format", "v9"], "--format"),
    ],
)
def test_notice_bad_numbers_name_the_flag(
    argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert_flag_error(*run_cli(["notice", *argv], capsys), "notice", flag)


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--notice", "bogus"], "--notice"),
        (["--notice", ""], "--notice"),
        (["--early-stop", "bogus"], "--early-stop"),
        (["--policy", "{bad"], "--policy"),
        (["--policy", "[1]"], "--policy"),
        (["--policy", '{"notice": {"kind": "zzz"}}'], "--policy"),
        (["--policy", '{"colour": "red"}'], "--policy"),
        (["--policy", '{"notice": {"kind": "at_most", "turns": -1}}'], "--policy"),
        (["--stages", "controller,bogus"], "--stages"),
        (["--stages", ","], "--stages"),
    ],
)
def test_demo_bad_policy_names_the_flag(
    argv: list[str], flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "demo"
    code, err = run_cli(["demo", "--quick", "--out", str(out), *argv], capsys)
    assert_flag_error(code, err, "demo", flag)
    assert not out.exists()  # rejected before any stage ran or wrote a trace


def test_demo_out_that_is_a_file_names_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "taken").write_text("x")
    code, err = run_cli(["demo", "--quick", "--out", str(tmp_path / "taken" / "d")], capsys)
    assert_flag_error(code, err, "demo", "--out")


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--a", "/no/such/checkpoint", "--b", "blind"], "--a"),
        (["--a", "oracle", "--b", "/no/such/checkpoint"], "--b"),
        (["--a", "oracle", "--b", "blind", "--episodes", "0"], "--episodes"),
        (["--a", "oracle", "--b", "blind", "--inject-at", "0"], "--inject-at"),
        (["--a", "oracle", "--b", "blind", "--success-rate", "nan"], "--success-rate"),
        (["--a", "oracle", "--b", "blind", "--success-rate", "1.5"], "--success-rate"),
        (["--a", "oracle", "--b", "blind", "--desc", "SXF,HHG"], "--desc"),
        (["--a", "oracle", "--b", "blind", "--budgets", "0,x"], "--budgets"),
    ],
)
def test_diagnose_bad_values_name_the_flag(
    argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert_flag_error(*run_cli(["diagnose", *argv], capsys), "diagnose", flag)


def test_diagnose_folder_without_a_model_names_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = run_cli(["diagnose", "--a", str(tmp_path), "--b", "blind"], capsys)
    assert_flag_error(code, err, "diagnose", "--a")
    assert "config.json" in err


EVAL = ["eval", "--env", "frozenlake", "--budgets", "4", "--no-progress", "--no-plots"]


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--env-kwargs", "[1]"], "--env-kwargs"),
        (["--env-kwargs", "5"], "--env-kwargs"),
        (["--env-kwargs", "{bad"], "--env-kwargs"),
        (["--env-kwargs", '{"map_name": "zz"}'], "--env-kwargs"),
        (["--env-kwargs", '{"map_name": "random", "map_seed": -1}'], "--env-kwargs"),
        (["--policy", '{"notice": {"kind": "zzz"}}'], "--policy"),
        (["--seeds", "-1"], "--seeds"),
        (["--tasks", "0"], "--tasks"),
        (["--budgets", "0"], "--budgets"),
        (["--budgets", "4,x"], "--budgets"),
        (["-k", "0"], "--samples"),
        (["--concurrency", "0"], "--concurrency"),
        (["--noise", "inf"], "--noise"),
        (["--temperature", "-1"], "--temperature"),
        (["--notice", "v9"], "--notice"),
        (["--training-ceiling", "0"], "--training-ceiling"),
        (["--fault-step", "0"], "--fault-step"),
        (["--n-boot", "0"], "--n-boot"),
        (["--agent", "openai", "--model-name", "m"], "--base-url"),
        (["--agent", "openai", "--base-url", "ftp://x", "--model-name", "m"], "--base-url"),
        (["--agent", "local"], "--model"),
    ],
)
def test_eval_bad_values_name_the_flag(
    argv: list[str], flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = run_cli([*EVAL, "--out", str(tmp_path / "ev"), *argv], capsys)
    assert_flag_error(code, err, "eval", flag)


@pytest.mark.parametrize("agent", ["local", "checkpoint"])
def test_eval_missing_model_never_reaches_the_loader(
    agent: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from budgetmix.adapters.local import LocalChatModel

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model loader (and the hub's download code) was reached")

    monkeypatch.setattr(LocalChatModel, "from_pretrained", forbidden)
    argv = [*EVAL, "--out", str(tmp_path / "ev"), "--agent", agent, "--model", "/no/such/model"]
    code, err = run_cli(argv, capsys)
    assert_flag_error(code, err, "eval", "--model")
    assert "Repo id" not in err


def test_eval_config_file_values_are_checked_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "c.json"
    cfg.write_text('{"env": "frozenlake", "budgets": [4], "env_kwargs": [1], "no_progress": true}')
    code, err = run_cli(["eval", "--config", str(cfg)], capsys)
    assert_flag_error(code, err, "eval", "--env-kwargs")
    cfg.write_text('{"env": "frozenlake", "budgets": [4], "samples": "3"}')
    code, err = run_cli(["eval", "--config", str(cfg)], capsys)
    assert_flag_error(code, err, "eval", "--samples")
    code, err = run_cli(["eval", "--config", str(tmp_path / "missing.toml")], capsys)
    assert_flag_error(code, err, "eval", "--config")


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["/no/such/results.jsonl"], "results"),
        (["x.jsonl", "-k", "0"], "-k"),
        (["x.jsonl", "--n-boot", "0"], "--n-boot"),
        (["x.jsonl", "--compare", "/no/such.jsonl"], "--compare"),
        (["x.jsonl", "--compare", "x.jsonl", "--labels", "a,b,c"], "--labels"),
    ],
)
def test_report_bad_values_name_the_flag(
    argv: list[str],
    flag: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.jsonl").write_text("")
    assert_flag_error(*run_cli(["report", *argv], capsys), "report", flag)


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--preset", "bogus"], "--preset"),
        (["--config", "/no/such/run.toml"], "--config"),
        (["--preset", "echo-tiny", "--set", "steps=-1"], "--set"),
        (["--preset", "echo-tiny", "--set", "nosuchfield=1"], "--set"),
        (["--preset", "echo-tiny", "--set", "noequals"], "--set"),
        (["--preset", "echo-tiny", "--set", "env_kwargs=[1]"], "--set"),
        (["--preset", "echo-tiny", "--set", "env_kwargs=5"], "--set"),
        (["--preset", "echo-tiny", "--set", "sampler=5"], "--set"),
        (["--preset", "echo-tiny", "--set", "model_path=/no/such/model"], "--set"),
    ],
)
def test_train_bad_values_name_the_flag(
    argv: list[str], flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "train"
    code, err = run_cli(["train", "--output-dir", str(out), *argv], capsys)
    assert_flag_error(code, err, "train", flag)
    assert not out.exists()  # nothing trained, nothing written


def test_train_output_dir_that_is_a_file_names_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "taken").write_text("x")
    argv = ["train", "--preset", "echo-tiny", "--output-dir", str(tmp_path / "taken")]
    assert_flag_error(*run_cli(argv, capsys), "train", "--output-dir")


def test_resume_with_nothing_to_resume_names_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("torch")
    argv = ["train", "--preset", "echo-tiny", "--output-dir", str(tmp_path / "empty")]
    code, err = run_cli([*argv, "--resume", "--no-progress"], capsys)
    assert_flag_error(code, err, "train", "--resume")


def test_argparse_errors_are_one_line_too(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run_cli(["notice", "--turns"], capsys)
    assert_flag_error(code, err, "notice", "--turns")
    code, err = run_cli(["demo", "--exhaustion", "never"], capsys)
    assert_flag_error(code, err, "demo", "--exhaustion")
    code, err = run_cli(["bogus"], capsys)
    assert code == 2 and len(err.splitlines()) == 1 and "invalid choice" in err


def test_the_script_exits_2_with_one_line(tmp_path: Path) -> None:
    """The real entry point: exit status 2 from the process, one stderr line."""
    for argv, flag in (
        (["notice", "--turns", "0"], "--turns"),
        (["notice", "--turn", "x"], "--turn"),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "budgetmix.cli", *argv],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )
        assert proc.returncode == 2, proc.stderr
        assert_flag_error(proc.returncode, proc.stderr, "notice", flag)
