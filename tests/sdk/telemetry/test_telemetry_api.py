"""The surface: every public name of the telemetry modules is in budgetmix.telemetry."""

from __future__ import annotations

import importlib

import budgetmix.telemetry as telemetry
import pytest

MODULES = ("configure", "jsonl", "log_redaction", "otlp_receiver", "processor", "redaction")


@pytest.mark.parametrize("module", MODULES)
def test_every_public_name_is_exported_once(module: str) -> None:
    mod = importlib.import_module(f"budgetmix.telemetry.{module}")
    for name in mod.__all__:
        assert name in telemetry.__all__, name
        assert getattr(telemetry, name) is getattr(mod, name), name


def test_all_holds_nothing_else() -> None:
    homes = [importlib.import_module(f"budgetmix.telemetry.{m}").__all__ for m in MODULES]
    assert sorted(telemetry.__all__) == sorted(name for names in homes for name in names)
    assert len(set(telemetry.__all__)) == len(telemetry.__all__)
