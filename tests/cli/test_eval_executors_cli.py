"""``budgetmix eval --workers N`` and ``--executor``: the thread records; bad values named."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from budgetmix.cli.eval import eval_main
from budgetmix.evaluation import read_results

FLAGS = ["--env", "faulty_tools", "--tasks", "3", "--budgets", "2,4", "-k", "2", "--agent",
         "noisy", "--noise", "0.3", "--no-progress", "--no-plots", "--n-boot", "20"]  # fmt: skip


def _records(path: Path) -> list[object]:
    recs = read_results(path / "results.jsonl").records
    return sorted((replace(r, latency_s=0.0) for r in recs), key=lambda r: r.key)


@pytest.mark.slow
def test_workers_run_a_process_pool_with_the_thread_records(tmp_path: Path) -> None:
    assert eval_main([*FLAGS, "--out", str(tmp_path / "t")]) == 0
    assert eval_main([*FLAGS, "--out", str(tmp_path / "p"), "--workers", "2"]) == 0
    assert _records(tmp_path / "p") == _records(tmp_path / "t")
    flags = [*FLAGS, "--out", str(tmp_path / "p"), "--executor", "process", "--workers", "2"]
    assert eval_main(flags) == 0  # a rerun: nothing left to do, nothing written twice
    assert len(_records(tmp_path / "p")) == 3 * 2 * 2


@pytest.mark.parametrize(
    ("flags", "named"),
    [(["--workers", "0"], "--workers"), (["--executor", "dask"], "--executor")],
)
def test_bad_executor_flags_name_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], named: str
) -> None:
    code = 2
    try:
        code = eval_main([*FLAGS, "--out", str(tmp_path / "x"), *flags])
    except SystemExit as exc:  # argparse's own choices check
        code = int(exc.code or 0)
    assert code == 2 and named in capsys.readouterr().err
