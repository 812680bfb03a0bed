"""Fixtures the adapter tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from budgetmix.adapters.testing import block_network


@pytest.fixture
def no_network() -> Iterator[None]:
    """Nothing the test runs may reach a non-loopback host (use with ``usefixtures``)."""
    with block_network():
        yield
