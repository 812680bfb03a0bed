"""The unsafe fallback's privilege drop: never model code as root.

Used only with ``run_python(..., allow_unsafe=True)`` on a machine without an OS
boundary. As root every such run drops to a fresh uid of its own (as the boundaries'
runs do), so that it cannot read the parent's ``/proc/<pid>/environ`` or root's
files, ``RLIMIT_NPROC`` binds it, and after the run every process of that uid, a
``setsid`` survivor included, is killed: the run returns only once ``/proc`` shows
none of them alive (:func:`kill_uid`; else :class:`SandboxKillError`). The fresh uid
must be able to read the interpreter's standard library: this interpreter's, else the
system's ``python3`` (the bootstrap needs only the standard library). Where neither
is readable, or ``drop_privileges=False`` is asked for, the run is refused
(:func:`unsafe_refusal`) rather than run as root; so is every unsafe run as root
outside Linux, where that kill has no ``/proc`` and no pidfds to check itself by.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import stat
import subprocess
import sys
import sysconfig
import time
from collections.abc import Sequence

from budgetmix.exceptions import BudgetmixError

__all__ = [
    "SandboxKillError",
    "kill_uid",
    "live_pids",
    "stdlib_readable_by_others",
    "unsafe_interpreter",
    "unsafe_refusal",
]

_SYSTEM_PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3")
_STDLIB_OF = "import sysconfig; print(sysconfig.get_paths()['stdlib'])"


def _traversable(path: str, *, readable: bool) -> bool:
    """Every directory down to ``path`` may be entered by other users (and ``path`` read)."""
    path = os.path.realpath(path)
    try:
        if readable and not os.stat(path).st_mode & stat.S_IROTH:
            return False
        while True:
            if os.path.isdir(path) and not os.stat(path).st_mode & stat.S_IXOTH:
                return False
            parent = os.path.dirname(path)
            if parent == path:
                return True
            path = parent
    except OSError:
        return False


def stdlib_readable_by_others(stdlib: str | None = None) -> bool:
    """True when every directory down to the standard library (this interpreter's, or
    ``stdlib``) is world-traversable and the library world-readable."""
    return _traversable(stdlib or sysconfig.get_paths()["stdlib"], readable=True)


def _stdlib_of(python: str) -> str:
    try:
        out = subprocess.run(
            [python, "-I", "-S", "-c", _STDLIB_OF],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


@functools.cache
def unsafe_interpreter() -> str | None:
    """An interpreter an unprivileged uid can run: this one, else the system's ``python3``."""
    if stdlib_readable_by_others() and _traversable(sys.executable, readable=True):
        return sys.executable
    for python in _SYSTEM_PYTHONS:
        if not os.access(python, os.X_OK) or not _traversable(python, readable=True):
            continue
        stdlib = _stdlib_of(python)
        if stdlib and stdlib_readable_by_others(stdlib):
            return python
    return None


def unsafe_refusal(drop: bool | None) -> str:
    """Why an unsafe run may not start here (``""``: it may). As root it must drop."""
    if os.geteuid() != 0:
        return ""
    if drop is False:
        return (
            "drop_privileges=False is refused as root: the unsafe fallback never runs "
            "model code as root"
        )
    if not sys.platform.startswith("linux"):
        return (
            "as root the unsafe fallback runs the code as a fresh uid and kills every process "
            "of it afterwards through /proc and pidfds, which only Linux has"
        )
    if unsafe_interpreter() is None:
        return (
            "as root the unsafe fallback runs the code as a fresh unprivileged uid, and no "
            "interpreter here is readable by one (this one's standard library is in a "
            "private directory, and there is no system python3)"
        )
    return ""


class SandboxKillError(BudgetmixError, RuntimeError):
    """Processes of an unsafe run's uid were still alive when :func:`kill_uid` gave up.

    They may be stuck in the kernel (uninterruptible sleep); the run's result is not
    returned, as its containment did not hold.

    Attributes:
        uid: the run's uid.
        pids: the processes of it still alive at the end.
    """

    def __init__(self, uid: int, pids: Sequence[int], timeout: float) -> None:
        self.uid = uid
        self.pids = tuple(pids)
        super().__init__(
            f"{len(self.pids)} process(es) of the unsafe run's uid {uid} still alive after "
            f"{timeout:g}s of SIGKILL (pids {', '.join(map(str, self.pids))})"
        )


def _status_fields(status: bytes) -> dict[bytes, bytes]:
    fields = {}
    for line in status.splitlines():
        key, _, value = line.partition(b":")
        fields[key] = value.strip()
    return fields


def live_pids(uid: int) -> list[int]:
    """The processes, from ``/proc``, whose real, effective or saved uid is ``uid`` and that
    still run: zombies are dead already (a zombie leader with live threads is not)."""
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as f:
                fields = _status_fields(f.read())
        except OSError:  # it ended meanwhile
            continue
        uids = fields.get(b"Uid", b"").split()[:3]
        if str(uid).encode() not in uids:
            continue
        dead = fields.get(b"State", b"Z")[:1] in (b"Z", b"X")
        if not dead or int(fields.get(b"Threads", b"1") or 1) > 1:
            pids.append(int(name))
    return pids


def _strike_as(uid: int) -> None:
    """``kill(-1, SIGKILL)`` from a forked child that has become ``uid``: it reaches every
    process of that uid at once (on Linux a fork under way fails or its child is hit too),
    and no process of any other uid. Its outcome is not trusted: :func:`live_pids` decides.

    Once it is that uid, a survivor can signal it: killed, it is reaped; stopped before
    it strikes, it is killed from here (it is our unreaped child, so the pid is its).
    """
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child: setuid, kill, exit
        with contextlib.suppress(BaseException):
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            os.kill(-1, signal.SIGKILL)
        os._exit(0)
    while True:
        _, status = os.waitpid(pid, os.WUNTRACED)
        if not os.WIFSTOPPED(status):
            return
        os.kill(pid, signal.SIGKILL)


def _kill_pinned(pid: int, uid: int) -> None:
    """SIGKILL ``pid`` from here (as root) if it is still a process of ``uid``.

    The pidfd pins the process before its uid is read, so a pid reused meanwhile by
    another process is never signalled: if the pinned one has ended, the signal fails.
    """
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:  # ended, or no pidfd here: the strike as the uid still repeats
        return
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            uids = _status_fields(f.read()).get(b"Uid", b"").split()[:3]
        if str(uid).encode() in uids:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    except OSError:  # it ended meanwhile
        pass
    finally:
        os.close(pidfd)


def kill_uid(uid: int, timeout: float = 10.0) -> None:
    """SIGKILL every process of ``uid`` (a run's own fresh uid) and return once ``/proc``
    shows none alive; as root.

    Each round strikes as the uid with ``kill(-1)`` (see :func:`_strike_as`), then kills
    from here each process of the uid that ``/proc`` still lists (a survivor cannot
    signal root back, as it can the striking child). ``kill(-1)`` reporting no target
    is not the test: on Linux it never does while other users' processes exist.

    Raises:
        SandboxKillError: some are still alive after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        _strike_as(uid)
        alive = live_pids(uid)
        if not alive:
            return
        for pid in alive:
            _kill_pinned(pid, uid)
        if time.monotonic() >= deadline:
            alive = live_pids(uid)
            if alive:
                raise SandboxKillError(uid, alive, timeout)
            return
        time.sleep(0.005)
