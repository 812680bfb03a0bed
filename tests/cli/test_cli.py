"""The command line: every command has --help, unknown commands fail clearly."""

from __future__ import annotations

from typing import Any

import pytest
from budgetmix.cli import main


@pytest.mark.parametrize("command", ["demo", "eval", "report", "train", "diagnose", "notice"])
def test_every_command_has_help(command: str, capsys: Any) -> None:
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    assert f"budgetmix {command}" in capsys.readouterr().out


def test_top_level_help_lists_the_commands(capsys: Any) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for command in ("demo", "eval", "report", "train", "notice"):
        assert command in out


def test_unknown_command_is_an_error(capsys: Any) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["bogus"])
    assert exc.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_notice_command_prints_the_final_turn(capsys: Any) -> None:
    assert main(["notice", "--turns", "3", "--turn", "3"]) == 0
    assert capsys.readouterr().out == "Budget (v1): turn 3 of 3, the final turn.\n"
