"""The gateway's config file and flags: every bad value named, nothing started."""

from __future__ import annotations

from pathlib import Path

import pytest
from budgetmix import ConfigError
from budgetmix.cli import main
from budgetmix.cli.gateway import parse_gateway_args
from budgetmix.gateway import load_config


def test_a_file_then_flags_over_it(tmp_path: Path) -> None:
    cfg = tmp_path / "gateway.toml"
    cfg.write_text('upstream = "http://up:1"\nstore = "memory://"\n[conversation]\nturns = 7\n'
                   "[tenant]\ntotal_tokens = 1000\nwindow_seconds = 3600\nheader = \"X-Team\"\n")
    config = load_config(cfg, {"port": 4100, "host": None}, environ={})
    assert (config.upstream, config.port, config.conversation.turns) == ("http://up:1", 4100, 7)
    assert config.tenant is not None and config.tenant.total_tokens == 1000
    assert config.tenant_window_seconds == 3600 and config.tenant_header == "x-team"
    assert config.admin_token is None
    token = load_config(cfg, environ={"BUDGETMIX_ADMIN_TOKEN": "t" * 20}).admin_token
    assert token == "t" * 20
    flags, _ = parse_gateway_args(["--config", str(cfg), "--turns", "3", "--cost-usd", "2"])
    assert flags.conversation.turns == 3 and flags.conversation.cost_usd == 2.0


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('upstrem = "http://x"', "upstrem"),
        ("[conversation]\nturns = 0", "conversation: Budget.turns"),
        ('upstream = "ftp://x"', "upstream"),
        ('on_exhausted = "maybe"', "on_exhausted"),
        ("[tenant]\nwindow_seconds = 0", "tenant.window_seconds"),
        ("port = 70000", "port"),
        ("not toml [", "not valid TOML"),
    ],
)
def test_a_bad_value_is_named(tmp_path: Path, text: str, named: str) -> None:
    cfg = tmp_path / "gateway.toml"
    cfg.write_text(text)
    with pytest.raises(ConfigError, match=named.replace(".", r"\.").replace("[", r"\[")):
        load_config(cfg, environ={})


def test_a_short_admin_token_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="admin_token: at least 16"):
        load_config(None, environ={"BUDGETMIX_ADMIN_TOKEN": "short"})


def test_the_command_names_a_bad_flag_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gateway", "--turns", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "budgetmix gateway: error:" in err and "turns" in err


def test_the_command_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["gateway", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "budgetmix gateway" in out and "--upstream" in out and "--fail-open" in out
