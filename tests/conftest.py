"""A backstop so that no test can hang CI.

pytest-timeout (``timeout`` in pyproject.toml) fails a test that runs too long by raising in
Python code, which cannot stop a test stuck in native code that never returns to the
interpreter (a Ray client waiting on its cluster, say), nor a fixture's teardown after the
timeout fired. Here the interpreter's own watchdog (:func:`faulthandler.dump_traceback_later`,
a C thread that needs no GIL) covers each test's setup, call and teardown: past the test's
timeout plus a grace period it writes every thread's stack to the real standard error and
ends the run with a non-zero status. A hung test then fails CI at once, with its stack,
instead of using up CI's whole time limit with no word of where.
"""

from __future__ import annotations

import faulthandler
import os
from collections.abc import Generator
from typing import IO

import pytest

GRACE_S = 120.0  # past pytest-timeout's own limit, so that one fires first where it can
_STREAM: list[IO[str]] = []


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    # Global capture is suspended while plugins are configured, so fd 2 is the real stderr
    # here; a duplicate of it still reaches the terminal while a test's output is captured.
    _STREAM.append(os.fdopen(os.dup(2), "w"))


def pytest_unconfigure(config: pytest.Config) -> None:
    faulthandler.cancel_dump_traceback_later()
    while _STREAM:
        _STREAM.pop().close()


def _limit_s(item: pytest.Item) -> float:
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        return float(marker.args[0])
    try:
        return float(item.config.getini("timeout") or 0)
    except ValueError:  # pytest-timeout is not installed: no limit to back up
        return 0.0


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None]:
    limit = _limit_s(item)
    if limit > 0 and _STREAM:
        faulthandler.dump_traceback_later(limit + GRACE_S, exit=True, file=_STREAM[0])
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
