"""``budgetmix voi``: the VoI table of a design, the gate's exit status, one-line flag errors."""

from __future__ import annotations

import json

import pytest
from budgetmix.cli import main


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[object, str, str]:
    try:
        code: object = main(["voi", *argv])
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_demo_map_table_at_the_base_error_rate(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["--env", "frozenlake-compact", "--error-rate", "0.3"], capsys)
    assert code == 0
    lines = out.splitlines()
    assert "error rate 0.3, ceiling 14 (noiseless)" in lines[0]
    rows = [line.split() for line in lines[2:6]]
    assert [r[0] for r in rows] == ["25%", "50%", "75%", "100%"]
    assert [r[1] for r in rows] == ["4", "7", "10", "14"]
    assert [r[-1] for r in rows] == ["0.0", "0.0", "0.0", "0.0"]


def test_the_gate_fails_with_exit_status_one_and_json_holds_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = _run(["--error-rate", "0", "--gate", "10"], capsys)
    assert code == 1 and "gate: FAIL -- VoI below 10 points: 0.0 at 25%" in out
    code, out, _ = _run(
        ["--env", "faulty-tools-compact", "--error-rate", "0", "--gate", "10", "--json"], capsys
    )
    data = json.loads(out)
    assert code == 0 and data["gate"]["passed"] is True  # noiseless: 22.7 / 22.3 points
    assert [round(r["voi"] * 100, 1) for r in data["rows"]] == [22.7, 22.3, 12.4, 6.0]


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--env", "humaneval"], "--env"),
        (["--error-rate", "2"], "--error-rate"),
        (["--ceiling", "0"], "--ceiling"),
        (["--env-kwargs", "[1]"], "--env-kwargs"),
        (["--env", "faulty-tools-compact", "--env-kwargs", '{"hops": 0}'], "--env-kwargs"),
        (["--fractions", "0.3", "0.6"], "--fractions"),  # no 25% / 50% row for the gate
    ],
)
def test_bad_flags_are_one_line_naming_the_flag(
    argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run([*argv, "--gate", "10"], capsys)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"budgetmix voi: error: {flag}: "), err
