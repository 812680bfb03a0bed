"""bench/server_rollouts.py --quick writes its table (nothing about speed is asserted)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_server_rollout_bench_runs_in_quick_mode(tmp_path: Path) -> None:
    out = tmp_path / "table.md"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "server_rollouts.py"), "--quick", "--out", str(out)],
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = out.read_text()
    rows = [
        line
        for line in table.splitlines()
        if line.startswith("| in-process") or line.startswith("| server")
    ]
    assert len(rows) == 2 and "server / in-process:" in table
