"""Reports rebuilt from a results file: summary, markdown, plots, comparisons."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from _eval_doubles import RandomWalker, line_tasks
from budgetmix.evaluation import (
    EvalConfig,
    Evaluator,
    build_report,
    compare_runs,
    cost_at_success,
    read_results,
    success_at_cost,
    summarize,
)
from budgetmix.exceptions import ConfigError, MissingExtraError

PNG = b"\x89PNG\r\n\x1a\n"
CFG = EvalConfig(budgets=(2, 4, 8), samples=3, training_ceiling=4, fault_step=2)


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("res") / "r.jsonl"
    Evaluator(lambda: RandomWalker(), line_tasks(4), CFG).run(path)
    return path


def test_summary_cells(results: Path) -> None:
    records = read_results(results).records
    s = summarize(records, n_boot=200)
    assert s["budgets"] == [2, 4, 8] and s["max_k"] == 3 and s["episodes"] == 36
    for cell in s["cells"]:
        assert sum(cell["failures"].values()) == cell["episodes"] == 12
        assert cell["extrapolated"] == (cell["budget"] > 4)
        assert [e["k"] for e in cell["pass_at_k"]] == [1, 2, 3]
        rate = sum(r.success for r in records if r.budget == cell["budget"]) / 12
        assert cell["pass_at_k"][0]["value"] == pytest.approx(rate)
        assert cell["recovery"]["fault"]["fault_step"] == 2
        assert cell["cost"]["latency_p50"] <= cell["cost"]["latency_p99"]
    assert s["frontier"]["metric"] == "model_calls"
    best = s["frontier"]["pareto"][-1]
    assert cost_at_success(s, best["success"]) == best
    assert success_at_cost(s, best["cost"]) == best
    assert success_at_cost(s, 0.0) is None


def test_build_report_rebuilds_everything(results: Path, tmp_path: Path) -> None:
    files = build_report(results, tmp_path / "a", n_boot=100)
    assert set(files) == {"summary", "markdown", "heatmap", "success_curves", "cost_curves"}
    for key in ("heatmap", "success_curves", "cost_curves"):
        data = files[key].read_bytes()
        assert len(data) > 1000 and data.startswith(PNG)
    md = files["markdown"].read_text()
    assert "| T | episodes | pass@1 | pass@2 | pass@3 |" in md
    assert "| 8* |" in md and "## Injected fault" in md
    again = build_report(results, tmp_path / "b", plots=False, n_boot=100)
    assert set(again) == {"summary", "markdown"}
    assert json.loads(again["summary"].read_text()) == json.loads(files["summary"].read_text())
    assert again["markdown"].read_text() == md


def test_compare_runs(results: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.jsonl"
    Evaluator(lambda: RandomWalker(), line_tasks(4), replace(CFG, seed=5)).run(other)
    cmp = compare_runs(results, other, tmp_path / "cmp", ("fixed", "budgetmix"), n_boot=100)
    assert [r["budget"] for r in cmp["rows"]] == [2, 4, 8]
    for row in cmp["rows"]:
        assert row["paired"]
        assert row["diff"]["value"] == pytest.approx(row["b"]["value"] - row["a"]["value"])
        assert row["diff"]["lo"] <= row["diff"]["value"] <= row["diff"]["hi"]
    assert Path(cmp["files"]["plot"]).read_bytes().startswith(PNG)
    assert (
        "| T | fixed | budgetmix | budgetmix - fixed | paired |"
        in (tmp_path / "cmp" / "comparison.md").read_text()
    )


def test_missing_matplotlib(results: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(MissingExtraError) as err:
        build_report(results, tmp_path, n_boot=50)
    assert (err.value.package, err.value.extra) == ("matplotlib", "plots")
    assert (tmp_path / "summary.json").exists()  # written before the plots


def test_empty_or_missing_results(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        build_report(tmp_path / "nope.jsonl", tmp_path)
    (tmp_path / "bad.jsonl").write_text("not json\n")
    with pytest.raises(ConfigError, match="header"):
        build_report(tmp_path / "bad.jsonl", tmp_path)
