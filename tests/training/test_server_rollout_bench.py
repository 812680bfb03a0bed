"""bench/server_rollouts.py --quick writes its table (nothing about speed is asserted)."""

from __future__ import annotations

import argparse
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


def test_the_token_capture_bench_times_both_clients_on_one_response() -> None:
    """bench/token_capture.py: both paths parse the same canned vLLM response; the SDK
    gets its log-probs only without TokenCapture (nothing about speed is asserted)."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import token_capture as bench
    finally:
        sys.path.remove(str(ROOT / "bench"))
    paths = bench.clients(bench.vllm_response(reply=5, prompt=7))
    assert set(paths) == {"SDK reads all", "TokenCapture"}
    assert paths["SDK reads all"]().choices[0].logprobs is not None
    handed = paths["TokenCapture"]()
    assert handed.choices[0].logprobs is None and handed.choices[0].message.content
    table = bench.run(argparse.Namespace(reply=5, prompt=7, repeats=2, calls=2))
    assert "| TokenCapture |" in table and "TokenCapture / SDK reads all:" in table
