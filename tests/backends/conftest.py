"""The backend group's fixture: one Phoenix server per test module (see ``_phoenix.py``);
skipped without Phoenix, failed under ``CI`` without it."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from _phoenix import Phoenix, phoenix_executable, start_phoenix, stop_phoenix


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Phoenix]:
    """One Phoenix server for the module."""
    if phoenix_executable() is None:
        reason = "no Phoenix: bash scripts/install_phoenix.sh (or set BUDGETMIX_PHOENIX)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    server = start_phoenix(tmp_path_factory.mktemp("phoenix"))
    yield server
    stop_phoenix(server)
