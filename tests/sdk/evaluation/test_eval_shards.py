"""Results files carry their identity (issue 26 item 7): a file of another run is refused
naming the flag that starts afresh, shard files of different runs are never read as one,
and the shards of one run merge (``budgetmix eval-merge``) into what one run writes."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from _eval_doubles import RandomWalker, line_tasks
from budgetmix.cli import main
from budgetmix.evaluation import EpisodeRecord, EvalConfig, Evaluator, read_results
from budgetmix.evaluation.results import merge_results, read_shards
from budgetmix.exceptions import ConfigError

CFG = EvalConfig(budgets=(2, 4), samples=2, concurrency=2)


def _outcomes(records: tuple[EpisodeRecord, ...]) -> list[EpisodeRecord]:
    return sorted((replace(r, latency_s=0.0) for r in records), key=lambda r: r.key)


def _run(path: Path, tasks: int = 4, config: EvalConfig = CFG, first: int = 0) -> None:
    chosen = line_tasks(first + tasks)[first:]
    Evaluator(lambda: RandomWalker(sees_budget=True), chosen, config).run(path)


def test_another_run_is_refused_naming_the_flag_and_the_same_run_resumes(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    _run(path, tasks=1)
    with pytest.raises(ConfigError, match=r"start afresh with overwrite=True.*--overwrite"):
        _run(path, tasks=1, config=replace(CFG, seed=7))
    again = Evaluator(lambda: RandomWalker(sees_budget=True), line_tasks(1), CFG).run(path)
    assert again.live_episodes == 0 and again.skipped == len(again.records) == 4


def test_concatenated_shards_of_different_runs_are_refused(tmp_path: Path) -> None:
    a, b, same = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "same.jsonl"
    _run(a, tasks=2)
    _run(b, tasks=2, config=replace(CFG, seed=7))
    _run(same, tasks=2, first=2)  # the other half of run a's grid
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(a.read_text() + b.read_text())
    header_line = len(a.read_text().splitlines()) + 1
    with pytest.raises(ConfigError, match=rf"line {header_line}: the header of another run"):
        read_results(mixed)
    with pytest.raises(ConfigError, match="different runs"):
        read_shards([a, b])
    one = tmp_path / "one.jsonl"
    one.write_text(a.read_text() + same.read_text())
    assert len(read_results(one).records) == 2 * 2 * 2 * 2  # 4 tasks, 2 budgets, K=2


def test_merged_shards_equal_one_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    whole = tmp_path / "whole.jsonl"
    _run(whole, tasks=4)
    halves = [tmp_path / "s0" / "results.jsonl", tmp_path / "s1" / "results.jsonl"]
    _run(halves[0], tasks=2)
    _run(halves[1], tasks=2, first=2)
    merged = merge_results(tmp_path / "m.jsonl", halves)
    assert _outcomes(read_results(merged).records) == _outcomes(read_results(whole).records)
    assert read_results(merged).header["fingerprint"] == read_results(whole).header["fingerprint"]
    with pytest.raises(ConfigError, match="exists"):
        merge_results(merged, halves)
    # the documented command: merge, then the report of the merged run
    out = tmp_path / "merged"
    assert main(["eval-merge", *map(str, halves), "--out", str(out), "--no-plots"]) == 0
    written = read_results(out / "results.jsonl")
    assert _outcomes(written.records) == _outcomes(read_results(whole).records)
    summary = json.loads((out / "summary.json").read_text())
    assert summary and "wrote:" in capsys.readouterr().out
    other = tmp_path / "other.jsonl"
    _run(other, tasks=2, config=replace(CFG, seed=7))
    code = main(["eval-merge", str(halves[0]), str(other), "--out", str(tmp_path / "x")])
    assert code == 2 and "different runs" in capsys.readouterr().err
    # merging again into the same folder is refused naming the flag that replaces it
    assert main(["eval-merge", *map(str, halves), "--out", str(out), "--no-plots"]) == 2
    assert "(budgetmix eval-merge --overwrite)" in capsys.readouterr().err
