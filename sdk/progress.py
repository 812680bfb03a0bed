"""Progress lines for long loops, written at a steady interval.

A terminal gets a live bar (rich); a file or a pipe gets nothing from a bar
until the end. :class:`ProgressLine` fills that gap: every ``interval_s``
seconds (``BUDGETMIX_PROGRESS_INTERVAL``, default 30) it writes one line::

    sft: step 40/300 (13%), elapsed 1m12s, ~7m50s left

and one more when the loop ends. The clock and the stream are injectable, so
tests drive it without waiting.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import TextIO

from budgetmix.exceptions import ConfigError

__all__ = [
    "DEFAULT_INTERVAL_S",
    "INTERVAL_ENV",
    "ProgressLine",
    "format_duration",
    "progress_interval",
    "progress_text",
]

#: Environment variable holding the seconds between two progress lines.
INTERVAL_ENV = "BUDGETMIX_PROGRESS_INTERVAL"
#: Seconds between two progress lines when the variable is not set.
DEFAULT_INTERVAL_S = 30.0


def progress_interval(environ: Mapping[str, str] | None = None) -> float:
    """Seconds between progress lines: ``BUDGETMIX_PROGRESS_INTERVAL`` or 30.

    Raises:
        ConfigError: the variable is not a number >= 0 (the message names it).
    """
    raw = (os.environ if environ is None else environ).get(INTERVAL_ENV, "").strip()
    if not raw:
        return DEFAULT_INTERVAL_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0.0 or value == float("inf"):
        raise ConfigError(f"{INTERVAL_ENV}: expected seconds >= 0, got {raw!r}")
    return value


def format_duration(seconds: float) -> str:
    """``45s``, ``1m12s``, ``2h05m``: whole seconds, the two largest units."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def progress_text(
    stage: str, done: int, total: int, elapsed: float, *, start: int = 0, unit: str = "step"
) -> str:
    r"""One progress line; the time left extrapolates the rate since ``start`` ``unit``\ s
    (``step``, or ``tokens`` for a loop that stops on a token budget)."""
    pct = 100 if total <= 0 else min(100, 100 * done // total)
    rate_steps = done - start
    if done >= total:
        left = "done"
    elif rate_steps > 0:
        left = f"~{format_duration(elapsed / rate_steps * (total - done))} left"
    else:
        left = "time left unknown"
    return f"{stage}: {unit} {done}/{total} ({pct}%), elapsed {format_duration(elapsed)}, {left}"


def _is_terminal(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if callable(isatty) else False
    except (OSError, ValueError):
        return False


class ProgressLine:
    """Writes :func:`progress_text` lines for one loop of ``total`` steps.

    ``enabled=None`` writes only when ``stream`` is not a terminal (a terminal
    has its live bar); ``True``/``False`` force it on or off. ``start`` is the
    step the loop resumes from; ``unit`` what is counted (``step``, ``tokens``).
    ``stream`` defaults to ``sys.stdout`` at write time; ``interval_s`` to
    :func:`progress_interval`. The clock starts at construction; :meth:`begin`
    restarts it when the loop starts later (a second phase), so its time left
    counts only its own time.
    """

    def __init__(
        self,
        stage: str,
        total: int,
        *,
        start: int = 0,
        enabled: bool | None = None,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        interval_s: float | None = None,
        unit: str = "step",
    ) -> None:
        self.stage, self.total, self.start, self.done = stage, total, start, start
        self.unit = unit
        self._stream, self._clock = stream, clock
        self.interval_s = progress_interval() if interval_s is None else interval_s
        self._began = self._last = clock()
        self._finished = False
        out = self.stream
        self.enabled = not _is_terminal(out) if enabled is None else enabled

    @property
    def stream(self) -> TextIO:
        """Where the lines go."""
        return sys.stdout if self._stream is None else self._stream

    def begin(self) -> None:
        """Start the clock now: the loop starts here (elapsed and time left count from now)."""
        self._began = self._last = self._clock()

    def update(self, done: int) -> None:
        """Record that ``done`` steps are complete; write a line when one is due."""
        self.done = done
        if not self.enabled or self._finished:
            return
        now = self._clock()
        if done >= self.total:
            self.finish()
        elif now - self._last >= self.interval_s:
            self._write(now)

    def advance(self, steps: int = 1) -> None:
        """Record ``steps`` more complete steps (see :meth:`update`)."""
        self.update(self.done + steps)

    def finish(self) -> None:
        """Write the closing line (once), whatever the interval."""
        if self.enabled and not self._finished:
            self._finished = True
            self._write(self._clock())

    def _write(self, now: float) -> None:
        self._last = now
        elapsed = now - self._began
        text = progress_text(
            self.stage, self.done, self.total, elapsed, start=self.start, unit=self.unit
        )
        print(text, file=self.stream, flush=True)
