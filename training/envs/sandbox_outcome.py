"""How a sandboxed run ended, in words: ``SandboxResult.reason``.

A limit the run reached reads as that limit, even when the run then met the wall
clock: a process the memory cgroup killed is ``"memory limit"``, processes that
together used the run's CPU seconds are ``"cpu time limit"``.
"""

from __future__ import annotations

import contextlib
import signal
from dataclasses import dataclass

from budgetmix.training.envs.sandbox_cgroup import RunCgroup

__all__ = ["Ran", "exit_status", "outcome", "read_capped"]


_SIGNAL_REASONS = {
    signal.SIGXCPU: "cpu time limit",
    signal.SIGXFSZ: "file size limit",
}


def read_capped(path: str, limit: int) -> tuple[str, bool]:
    """The first ``limit`` characters of the file at ``path``, and whether it held more."""
    with open(path, "rb") as f:
        # A UTF-8 character is at most 4 bytes, so this many bytes hold `limit` characters.
        data = f.read(limit * 4 + 1)
    text = data.decode("utf-8", errors="replace")
    truncated = len(data) > limit * 4 or len(text) > limit
    return text[:limit], truncated


def _reason(returncode: int, stderr: str) -> str:
    if returncode < 0:
        sig = -returncode
        if sig in _SIGNAL_REASONS:
            return _SIGNAL_REASONS[signal.Signals(sig)]
        try:
            return f"killed by {signal.Signals(sig).name}"
        except ValueError:
            return f"killed by signal {sig}"
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in reversed(lines):
        if "[sandbox] blocked: " in line:
            return "blocked: " + line.split("[sandbox] blocked: ", 1)[1]
    last = lines[-1] if lines else ""
    if last.startswith("MemoryError"):
        return "memory limit"
    if "[Errno 27]" in last:  # EFBIG: Python ignores SIGXFSZ, so RLIMIT_FSIZE shows up here
        return "file size limit"
    if "[Errno 28]" in last:  # ENOSPC: the run's tmpfs is full
        return "disk limit"
    return f"exit code {returncode}: {last}"[:300]


def exit_status(returncode: int, boundary: str | None) -> int:
    """The interpreter's status: the boundaries report a signal as ``128 + signal``."""
    if boundary is not None and returncode > 128:
        with contextlib.suppress(ValueError):
            return -signal.Signals(returncode - 128)
    return returncode


@dataclass(frozen=True, slots=True)
class Ran:
    """How a run ended: its raw status, whether the wall clock ended it, and then the
    CPU seconds its processes had used (measured through its cgroup; 0 without one)."""

    returncode: int
    timed_out: bool
    cpu_seconds: float
    cpu_limit: int
    wall: float


def outcome(rc: int, stderr: str, run: Ran, ready: bool, cgroup: RunCgroup | None) -> str:
    """The run's reason. A limit that made the run meet the wall clock is named as
    itself: the memory cgroup killed a process, or the run's processes together used
    their CPU seconds (a CPU bomb of many processes, each under ``RLIMIT_CPU``)."""
    if not ready and not run.timed_out:
        lines = [line.strip() for line in stderr.splitlines() if line.strip()]
        return ("sandbox setup failed: " + (lines[-1] if lines else f"exit code {rc}"))[:300]
    if ready and cgroup is not None and cgroup.oom_killed():
        return "memory limit"
    if run.timed_out:
        if ready and run.cpu_seconds >= run.cpu_limit:
            return "cpu time limit"
        return f"timeout after {run.wall:g}s"
    if rc == 0:
        return ""
    return _reason(rc, stderr)
