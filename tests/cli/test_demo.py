"""The main job's quick mode runs end to end and writes what the README says."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from budgetmix.cli.demo_summary import DemoResults, summary_lines

pytestmark = pytest.mark.slow  # the demo end to end: outside the unit loop (-m "not slow")


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
    assert "## " not in proc.stdout  # the grid's reports stay in their files
    assert (out / "grid" / "aware-oracle" / "eval.log").read_text().startswith("40 episodes")
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
    # what the README says to look for: `yes` in the episode table's last column, grace
    assert any(line.rstrip("│ ").endswith(" yes") for line in proc.stdout.splitlines())


# The whole --quick demo (every stage, to deployment) runs once per suite, in
# tests/test_setup_fresh_clone.py::test_demo_quick_runs_every_stage: on a fresh clone's
# demo set-up, or on this interpreter where no clone can be set up.


def _controller_stage(out: Path, *extra: str) -> tuple[str, dict[str, Any]]:
    demo = [sys.executable, "-m", "budgetmix.cli", "demo", "--stages", "controller"]
    proc = subprocess.run(
        [*demo, "--out", str(out), *extra],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout, json.loads((out / "controller.json").read_text())["per_budget"]


def test_readme_early_stop_example_stops_stuck_agents(tmp_path: Path) -> None:
    """The README's ``--policy '{"early_stop": ...}'`` example shows its effect: episodes
    stuck on one failing call stop early, which the default run never does."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    policy = '{"early_stop": {"kind": "repeated_mistakes", "n": 2}}'
    assert f"--policy '{policy}'" in readme
    default_out, default = _controller_stage(tmp_path / "default")
    stopped_out, stopped = _controller_stage(tmp_path / "stopped", "--policy", policy)
    assert all(row["early_stopped_rate"] == 0 for row in default.values())
    assert "stopped early (" not in default_out
    assert any(row["early_stopped_rate"] > 0 for row in stopped.values())
    assert "repeated_mistakes: 2 consecutive" in stopped_out
    # a stopped episode ends sooner: fewer turns spent where the budget is roomy
    assert stopped["8"]["mean_turns"] < default["8"]["mean_turns"]


def test_summary_gives_headlines_and_where_things_are(tmp_path: Path) -> None:
    (tmp_path / "grid" / "aware-oracle").mkdir(parents=True)
    (tmp_path / "grid" / "aware-oracle" / "pass_kt_heatmap.png").write_bytes(b"png")
    row = {"episodes": 4, "mistakes": 3, "recoveries": 2, "early_stopped_rate": 0.25}
    controller = {
        "2": {**row, "success_rate": 0.0},
        "6": {**row, "success_rate": 1.0},
    }
    grid = {
        "pass1": {
            "aware-oracle": {"4": (0.5, 0.1, 0.9), "8": (0.75, 0.4, 1.0)},
            "blind-oracle": {"4": (0.25, 0.0, 0.6), "8": (0.5, 0.1, 0.9)},
        }
    }
    report = {
        "comparison": [
            {"arm": "budgetmix", "fraction": "25%", "diff": 0.07},
            {"arm": "budgetmix", "fraction": "100%", "diff": -0.02},
        ],
        "files": {"report": str(tmp_path / "experiment" / "report.md")},
    }
    train = {"report": report, "deployed": {"4": {"success_rate": 0.5}}}
    results = DemoResults(
        controller=controller,
        grid=grid,
        train=train,
        traces=f"{tmp_path / 'traces.jsonl'} (1,234 spans exported, 0 lost)",
    )
    lines = summary_lines(tmp_path, results)
    text = "\n".join(lines)
    assert len(lines) <= 12  # one short block
    assert "success 0% / 100% at T = 2 / 6 (6 mistakes, 4 recoveries, 2 stopped early)" in text
    assert "aware-oracle 0.50 / 0.75; blind-oracle 0.25 / 0.50" in text
    assert "+7.0 / -2.0 at 25% / 100% of the ceiling" in text
    assert "deployed checkpoint: success 50% at T = 4" in text
    assert f"traces   {tmp_path / 'traces.jsonl'} (1,234 spans exported, 0 lost)" in text
    assert str(tmp_path / "experiment" / "report.md") in text
    assert f"plots    {tmp_path / 'grid/*'} (1)" in text


def test_summary_of_one_stage_names_only_its_files(tmp_path: Path) -> None:
    row = {"episodes": 2, "mistakes": 0, "recoveries": 0, "success_rate": 1.0}
    results = DemoResults(
        controller={"4": row}, traces=f"{tmp_path / 't.jsonl'} (3 spans exported, 0 lost)"
    )
    text = "\n".join(summary_lines(tmp_path, results))
    assert "(0 mistakes, 0 recoveries)" in text
    assert "controller.json" in text and "grid" not in text and "report" not in text
    assert "plots    none" in text
