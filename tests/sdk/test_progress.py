"""Progress lines at a steady interval when output is not a terminal (fake clock, no waiting)."""

from __future__ import annotations

import io

import pytest
from budgetmix.exceptions import ConfigError
from budgetmix.progress import (
    INTERVAL_ENV,
    ProgressLine,
    format_duration,
    progress_interval,
    progress_text,
)


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _lines(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


def test_the_line_names_stage_step_share_elapsed_and_time_left() -> None:
    assert progress_text("sft", 40, 300, 72.0) == (
        "sft: step 40/300 (13%), elapsed 1m12s, ~7m48s left"
    )
    assert progress_text("rl", 0, 10, 5.0) == "rl: step 0/10 (0%), elapsed 5s, time left unknown"
    assert progress_text("rl", 10, 10, 3725.0) == "rl: step 10/10 (100%), elapsed 1h02m, done"


def test_time_left_counts_only_the_steps_this_process_ran() -> None:
    # resumed at step 50: 10 steps in 20 s, 40 to go -> 80 s
    assert progress_text("rl", 60, 100, 20.0, start=50).endswith("~1m20s left")


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (59.4, "59s"), (60, "1m00s"), (3599, "59m59s"), (7500, "2h05m")],
)
def test_durations(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_lines_come_at_the_interval_and_once_at_the_end() -> None:
    clock, out = FakeClock(), io.StringIO()
    bar = ProgressLine("sft", 10, stream=out, clock=clock, interval_s=30.0)
    for step in range(1, 10):
        clock.now += 10.0  # one step every 10 s: a line every third step
        bar.update(step)
    assert [line.split(",")[0] for line in _lines(out)] == [
        "sft: step 3/10 (30%)",
        "sft: step 6/10 (60%)",
        "sft: step 9/10 (90%)",
    ]
    assert _lines(out)[0] == "sft: step 3/10 (30%), elapsed 30s, ~1m10s left"
    clock.now += 1.0
    bar.advance()
    bar.finish()  # a second finish writes nothing more
    assert _lines(out)[-1] == "sft: step 10/10 (100%), elapsed 1m31s, done"
    assert len(_lines(out)) == 4


def test_nothing_between_intervals() -> None:
    clock, out = FakeClock(), io.StringIO()
    bar = ProgressLine("eval", 1000, stream=out, clock=clock, interval_s=30.0)
    for step in range(1, 500):
        clock.now += 0.01
        bar.update(step)
    assert out.getvalue() == ""


def test_a_terminal_gets_no_lines_unless_forced() -> None:
    clock, tty = FakeClock(), Terminal()
    ProgressLine("sft", 1, stream=tty, clock=clock, interval_s=0.0).update(1)
    assert tty.getvalue() == ""
    ProgressLine("sft", 1, stream=tty, clock=clock, interval_s=0.0, enabled=True).update(1)
    assert tty.getvalue().startswith("sft: step 1/1 (100%)")


def test_disabled_writes_nothing() -> None:
    out = io.StringIO()
    bar = ProgressLine("sft", 2, stream=out, clock=FakeClock(), interval_s=0.0, enabled=False)
    bar.update(1)
    bar.finish()
    assert out.getvalue() == ""


def test_interval_from_the_environment() -> None:
    assert progress_interval({}) == 30.0
    assert progress_interval({INTERVAL_ENV: "2.5"}) == 2.5
    assert progress_interval({INTERVAL_ENV: "0"}) == 0.0
    for bad in ("-1", "soon", "nan", "inf"):
        with pytest.raises(ConfigError, match=INTERVAL_ENV):
            progress_interval({INTERVAL_ENV: bad})


def test_the_default_interval_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(INTERVAL_ENV, "7")
    assert ProgressLine("x", 3, stream=io.StringIO()).interval_s == 7.0
