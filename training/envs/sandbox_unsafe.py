"""The unsafe fallback's privilege drop: to ``nobody``, where that user can still run Python.

Used only with ``run_python(..., allow_unsafe=True)`` on a machine without an OS
boundary, where it is the old ``drop_privileges`` behaviour: as root the child
drops to ``nobody`` so that ``RLIMIT_NPROC`` applies and file permissions bind
it -- but only where ``nobody`` can read the standard library (not when Python
lives under a private home such as ``/root/.pyenv``).
"""

from __future__ import annotations

import os

__all__ = ["nobody_ids", "stdlib_readable_by_others"]


def stdlib_readable_by_others() -> bool:
    """True when every directory down to the standard library is world-traversable."""
    import stat
    import sysconfig

    path = os.path.realpath(sysconfig.get_paths()["stdlib"])
    try:
        if not os.stat(path).st_mode & stat.S_IROTH:
            return False
        while True:
            if not os.stat(path).st_mode & stat.S_IXOTH:
                return False
            parent = os.path.dirname(path)
            if parent == path:
                return True
            path = parent
    except OSError:
        return False


def nobody_ids(drop: bool | None) -> tuple[int, int] | None:
    """The uid and gid the unsafe fallback drops to, if any (the old ``drop_privileges``)."""
    if drop is False or os.geteuid() != 0:
        return None
    if drop is None and not stdlib_readable_by_others():
        return None
    import pwd

    try:
        entry = pwd.getpwnam("nobody")
    except KeyError:
        return None
    return entry.pw_uid, entry.pw_gid
