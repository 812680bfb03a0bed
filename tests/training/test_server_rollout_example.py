"""examples/server_rollouts.py runs as docs/training.md ("Server rollouts") shows it: on the
user's checkpoint and environment, two RL steps rolled out through the controller and the
local OpenAI-compatible server."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _layout_fixtures import build_bpe_tokenizer, save_tiny_checkpoint

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_example_trains_through_the_local_server(tmp_path: Path) -> None:
    save_tiny_checkpoint("qwen", build_bpe_tokenizer("qwen"), tmp_path / "base")
    shutil.copy(ROOT / "examples" / "user_env.py", tmp_path / "user_env.py")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(tmp_path)}
    script = str(ROOT / "examples" / "server_rollouts.py")
    proc = subprocess.run(
        [sys.executable, script, "base", "user_env:Counter"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    steps, served = (line.split() for line in proc.stdout.splitlines()[:2])
    assert steps[:2] == ["steps", "2"] and int(steps[3]) >= 2  # two episodes, a request or more
    assert int(served[-1]) >= 4  # both steps' requests reached the server
    assert (tmp_path / "runs" / "server" / "final" / "manifest.json").is_file()
