"""The unsafe fallback's privilege drop: never model code as root.

Used only with ``run_python(..., allow_unsafe=True)`` on a machine without an OS
boundary. As root every such run drops to a fresh uid of its own (as the boundaries'
runs do), so that it cannot read the parent's ``/proc/<pid>/environ`` or root's
files, ``RLIMIT_NPROC`` binds it, and after the run every process of that uid, a
``setsid`` survivor included, is killed (:func:`kill_uid`). The fresh uid must be
able to read the interpreter's standard library: this interpreter's, else the
system's ``python3`` (the bootstrap needs only the standard library). Where neither
is readable, or ``drop_privileges=False`` is asked for, the run is refused
(:func:`unsafe_refusal`) rather than run as root.
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

__all__ = ["kill_uid", "stdlib_readable_by_others", "unsafe_interpreter", "unsafe_refusal"]

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
    if unsafe_interpreter() is None:
        return (
            "as root the unsafe fallback runs the code as a fresh unprivileged uid, and no "
            "interpreter here is readable by one (this one's standard library is in a "
            "private directory, and there is no system python3)"
        )
    return ""


def kill_uid(uid: int, timeout: float = 2.0) -> None:
    """SIGKILL every process of ``uid`` (a run's own fresh uid), until none is left.

    A forked child takes that uid and calls ``kill(-1, SIGKILL)``, which reaches exactly
    the processes of that uid, wherever they are (a ``setsid`` survivor included).
    """
    deadline = time.monotonic() + timeout
    while True:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child: setuid, kill, exit
            status = 1
            with contextlib.suppress(BaseException):
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
                try:
                    os.kill(-1, signal.SIGKILL)
                    status = 0  # something was there
                except ProcessLookupError:
                    status = 3  # nothing left
            os._exit(status)
        _, status = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status) != 0 or time.monotonic() >= deadline:
            return
        time.sleep(0.01)
