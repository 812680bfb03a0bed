"""What ``budgetmix eval`` shows while it runs (a live bar on a terminal, lines when
piped) and when it is interrupted (what was saved, the command that resumes)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from budgetmix.cli._errors import resume_command
from budgetmix.evaluation.results import EpisodeRecord
from budgetmix.progress import ProgressLine

__all__ = ["interrupt_account", "progress_callbacks"]


def progress_callbacks(
    enabled: bool,
) -> tuple[Any, Callable[[int, int], None], Callable[[EpisodeRecord], None]]:
    """The live bar on a terminal; piped, ``eval:`` progress lines at the interval."""
    if not enabled:
        return None, lambda total, skipped: None, lambda rec: None
    if not sys.stdout.isatty():
        return _progress_lines()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    bar = Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        transient=False,
    )
    state: dict[str, Any] = {"id": None, "ok": 0}

    def on_plan(total: int, skipped: int) -> None:
        if skipped:
            bar.console.print(f"resuming: {skipped} episodes already in the results file")
        state["id"] = bar.add_task("episodes", total=total)

    def on_record(rec: EpisodeRecord) -> None:
        state["ok"] += int(rec.success)
        bar.update(state["id"], advance=1, description=f"episodes ({state['ok']} solved)")

    return bar, on_plan, on_record


def _progress_lines() -> tuple[Any, Callable[[int, int], None], Callable[[EpisodeRecord], None]]:
    lines: list[ProgressLine] = []

    def on_plan(total: int, skipped: int) -> None:
        if skipped:
            print(f"resuming: {skipped} episodes already in the results file", flush=True)
        lines.append(ProgressLine("eval", total, enabled=True))

    def on_record(rec: EpisodeRecord) -> None:
        if lines:
            lines[0].advance()

    return contextlib.nullcontext(), on_plan, on_record


def interrupt_account(results: Path | None, argv: Sequence[str]) -> str:
    """What an interrupted evaluation saved and the command that resumes it."""
    if results is None or not results.is_file():
        return "nothing was written"
    from budgetmix.evaluation.results import read_results

    done = len(read_results(results).records)
    again = resume_command("budgetmix eval", argv)
    return f"{done} episodes saved in {str(results)!r}; resume with: {again}"
