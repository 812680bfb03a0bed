"""Fixtures of the framework integration group: the loopback fake LLM server, an
in-memory span exporter, and the network guard (nothing may leave the machine)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from _integration_support import Spans
from budgetmix.adapters.testing import FakeLLMServer, block_network


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # every test of this folder is in the `integrations` group (`-m integrations`), and
    # slow: unmodified frameworks end to end, outside the unit loop (`-m "not slow"`)
    for item in items:
        if "tests/integrations/" in item.nodeid.replace("\\", "/"):
            item.add_marker(pytest.mark.integrations)
            item.add_marker(pytest.mark.slow)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    # the unit loop (`-m "not slow"`) deselects every test here: it need not import the
    # frameworks at all (several seconds of collection)
    unit_loop = " ".join(str(config.getoption("markexpr") or "").split()) == "not slow"
    return True if unit_loop and collection_path.name.startswith("test_") else None


@pytest.fixture(autouse=True)
def no_network() -> Iterator[None]:
    """Loopback only: a framework that tries to reach a real host fails the test."""
    with block_network():
        yield


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    """The scripted OpenAI/Anthropic-compatible server on 127.0.0.1."""
    with FakeLLMServer() as s:
        yield s


@pytest.fixture
def spans() -> Iterator[Spans]:
    s = Spans()
    yield s
    s.provider.shutdown()
