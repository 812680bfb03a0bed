"""The main job's quick mode runs end to end and writes what the README says."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def test_demo_quick_controller_and_grid(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "budgetmix.cli",
            "demo",
            "--quick",
            "--stages",
            "controller,grid",
            "--out",
            str(out),
            "--notice",
            "final_turn",
            "--exhaustion",
            "grace",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    controller = json.loads((out / "controller.json").read_text())
    assert controller["policy"] == {"notice": "final_turn", "exhaustion": "grace"}
    rates = {t: row["success_rate"] for t, row in controller["per_budget"].items()}
    assert rates["2"] <= rates["6"]  # more turns, more recoveries completed
    for agent in ("aware-oracle", "blind-oracle", "noisy-oracle"):
        summary = json.loads((out / "grid" / agent / "summary.json").read_text())
        assert summary["budgets"] == [4, 8, 12, 16, 24]
        assert (out / "grid" / agent / "pass_kt_heatmap.png").stat().st_size > 0
    spans = [json.loads(line) for line in (out / "traces.jsonl").read_text().splitlines()]
    names = {s["name"].split(" ")[0] for s in spans}
    assert {"invoke_agent", "chat", "execute_tool"} <= names
    grace = [s for s in spans if s["attributes"].get("budgetmix.grace_turn")]
    assert grace, "grace mode produces grace turns at T=2"


def test_demo_quick_runs_every_stage(tmp_path: Path) -> None:
    """The README's main job in --quick mode: controller, grid, training, deployment."""
    out = tmp_path / "demo"
    proc = subprocess.run(
        [sys.executable, "-m", "budgetmix.cli", "demo", "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=1200,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "BudgetMix minus fixed" in proc.stdout
    assert "deployed under the controller" in proc.stdout
    summary = json.loads((out / "experiment" / "summary.json").read_text())
    arms = {row["arm"] for row in summary["grid"]}
    assert {"base", "fixed"} <= arms and any(a.startswith("budgetmix") for a in arms)
    assert (out / "experiment" / "report.md").read_text().startswith("#")
    spans = [json.loads(line) for line in (out / "traces.jsonl").read_text().splitlines()]
    deployed = [s for s in spans if s["name"] == "invoke_agent frozenlake-agent"]
    assert deployed and all("budgetmix.status" in s["attributes"] for s in deployed)
