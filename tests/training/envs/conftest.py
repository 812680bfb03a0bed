"""The sandbox boundary each sandbox test runs in."""

from __future__ import annotations

import os

import pytest
from budgetmix.training.envs.sandbox import probe_boundary
from budgetmix.training.envs.sandbox_boundary import BOUNDARIES


@pytest.fixture(params=BOUNDARIES)
def boundary(request: pytest.FixtureRequest) -> str:
    """Each boundary this machine can set up.

    A developer machine without one (no bubblewrap, not root) skips it and says why. In
    CI (``CI`` set; Linux, root, bubblewrap installed by the set-up script) every boundary
    must work, so a missing one fails instead of skipping the attack tests.
    """
    name: str = request.param
    missing = probe_boundary(name)
    if missing and os.environ.get("CI"):
        pytest.fail(f"CI must have every sandbox boundary: {missing}")
    if missing:
        pytest.skip(missing)
    return name
