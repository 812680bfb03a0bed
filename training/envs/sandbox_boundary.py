"""The operating-system boundary of a sandboxed run: what this machine lacks, and the command.

Two boundaries, both Linux only, both giving the run its own PID, mount,
network, IPC and UTS namespaces (so no view of other processes, only a
loopback device that is down, and a filesystem of its own):

* ``bwrap`` (bubblewrap). As root it runs without a user namespace and the
  child drops to a fresh *outer* uid itself (a uid mapped to root inside a user
  namespace would still own root's files); as another user it makes an
  unprivileged user namespace, so the uid is that user's and is not root.
* ``unshare`` (util-linux), root only: a shell in the new namespaces mounts the
  same view, ``pivot_root``\\ s into it and unmounts the old root. ``setpriv
  --pdeathsig`` and ``unshare --kill-child`` make the run die with its caller.

The view is read-only except the run's directory ``/work``: ``/usr`` and the
top-level links into it (``/bin``, ``/lib``, ...), the interpreter's install
prefix when it lives elsewhere, a fresh ``/proc`` of the run's own PID
namespace, a minimal ``/dev`` and ``/work``, a tmpfs whose size is the run's
disk quota. Nothing else of the host -- no ``/etc``, ``/home``, ``/root``,
``/tmp`` or the repository -- is in it, and everything is ``nosuid``.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "BOUNDARIES",
    "PROGRAM",
    "SANDBOX_ENV",
    "WORK",
    "Interpreter",
    "bwrap_command",
    "interpreter",
    "missing_prerequisite",
    "unshare_command",
]

#: The boundaries :func:`~budgetmix.training.envs.sandbox.run_python` can use, preferred first.
BOUNDARIES = ("bwrap", "unshare")
#: The run's directory inside the view (its working directory, its disk quota).
WORK = "/work"
#: Where the program lies inside the view.
PROGRAM = "/work/main.py"
#: The whole environment of the sandboxed interpreter.
SANDBOX_ENV = {"LANG": "C.UTF-8", "PATH": "/usr/bin:/bin", "HOME": WORK, "TMPDIR": WORK}

_TOOL_PATH = os.pathsep.join(["/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/local/bin"])
_UNSHARE_TOOLS = ("setpriv", "unshare", "mount", "umount", "pivot_root", "sh", "cp", "mkdir", "ln")
_DEVICES = ("null", "zero", "full", "random", "urandom")

# Runs as root inside the new namespaces: builds the view on a tmpfs at $1, pivots into
# it, then runs the interpreter (after `--`) as a child, so that this shell stays PID 1
# and the whole namespace dies when it exits.
_UNSHARE_SCRIPT = r"""
set -eu
PATH=/usr/sbin:/usr/bin:/sbin:/bin
root=$1 size=$2 program=$3
shift 3
mount -t tmpfs -o mode=0755,size=4m,nosuid,nodev budgetmix-root "$root"
while [ "$1" != -- ]; do
  case $1 in
    ro) mkdir -p "$root$2"; mount --bind "$2" "$root$2"
        mount -o remount,bind,ro,nosuid,nodev "$root$2"; shift 2 ;;
    link) ln -s "$3" "$root$2"; shift 3 ;;
    dir) mkdir -p -m 0755 "$root$2"; shift 2 ;;
    *) echo "[sandbox] setup: bad view entry $1" >&2; exit 125 ;;
  esac
done
shift
mkdir "$root/work" "$root/proc" "$root/dev" "$root/.old"
mount -t tmpfs -o "size=$size,mode=1777,nosuid,nodev" budgetmix-work "$root/work"
cp "$program" "$root/work/main.py"
mount -t proc -o nosuid,nodev,noexec proc "$root/proc"
for d in DEVICES; do : > "$root/dev/$d"; mount --bind "/dev/$d" "$root/dev/$d"; done
cd "$root"
pivot_root . .old
cd /
umount -l /.old
rmdir /.old
mount -o remount,ro,nosuid,nodev /
set +e
env -i SANDBOX_ENV "$@"
exit $?
""".replace("DEVICES", " ".join(_DEVICES))
_UNSHARE_SCRIPT = _UNSHARE_SCRIPT.replace(
    "SANDBOX_ENV", " ".join(f"{k}={v}" for k, v in SANDBOX_ENV.items())
)


def _tool(name: str) -> str | None:
    return shutil.which(name, path=os.environ.get("PATH", "") + os.pathsep + _TOOL_PATH)


@dataclass(frozen=True, slots=True)
class Interpreter:
    """The Python the sandbox runs, and what of the host it needs to see."""

    executable: str
    #: Directories bound read-only at their own path, besides ``/usr``.
    binds: tuple[str, ...]


def interpreter() -> Interpreter:
    """This interpreter's real executable and install prefix (the stdlib is all it needs)."""
    exe = os.path.realpath(sys.executable)
    dirs = {os.path.realpath(p) for p in (sys.base_prefix, sys.base_exec_prefix)}
    if not any(exe.startswith(d.rstrip("/") + "/") for d in dirs):
        dirs.add(os.path.dirname(exe))
    binds = sorted(d for d in dirs if d != "/usr" and not d.startswith("/usr/"))
    return Interpreter(exe, tuple(b for b in binds if not _covered(b, binds)))


def _covered(path: str, others: Sequence[str]) -> bool:
    return any(o != path and path.startswith(o.rstrip("/") + "/") for o in others)


def missing_prerequisite(name: str) -> str:
    """Why boundary ``name`` cannot work here, without trying it; empty when nothing is missing."""
    if not sys.platform.startswith("linux"):
        return f"{name}: needs Linux namespaces (this is {sys.platform})"
    if "/" in interpreter().binds:
        return f"{name}: the interpreter's install prefix is /, which cannot be bound alone"
    if name == "bwrap":
        if _tool("bwrap") is None:
            return "bwrap: bubblewrap is not installed (Debian: apt-get install bubblewrap)"
        return ""
    if name == "unshare":
        if os.geteuid() != 0:
            return f"unshare: needs root (running as uid {os.geteuid()}); install bubblewrap"
        lacking = [t for t in _UNSHARE_TOOLS if _tool(t) is None]
        return f"unshare: not found: {', '.join(lacking)} (util-linux)" if lacking else ""
    return f"{name}: unknown boundary"


def _view() -> list[tuple[str, ...]]:
    """The view's entries: ``("ro", path)``, ``("link", path, target)`` or ``("dir", path)``."""
    entries: list[tuple[str, ...]] = [("ro", "/usr")]
    for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = "/" + top
        if os.path.islink(path):
            entries.append(("link", path, os.readlink(path)))
        elif os.path.isdir(path):
            entries.append(("ro", path))
    for bind in interpreter().binds:
        parts = bind.strip("/").split("/")
        for i in range(1, len(parts)):
            entries.append(("dir", "/" + "/".join(parts[:i])))
        entries.append(("ro", bind))
    return entries


def bwrap_command(*, disk_bytes: int, host_program: str, as_root: bool) -> list[str]:
    """The ``bwrap`` argv up to ``--``; the interpreter's argv follows it."""
    bwrap = _tool("bwrap") or "bwrap"
    argv = [bwrap, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net"]
    argv += ["--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if as_root:  # the child drops to its own outer uid; it needs these two until then
        argv += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        argv += ["--unshare-user", "--disable-userns"]
    for entry in _view():
        if entry[0] == "ro":
            argv += ["--ro-bind", entry[1], entry[1]]
        elif entry[0] == "link":
            argv += ["--symlink", entry[2], entry[1]]
        else:
            argv += ["--perms", "0755", "--dir", entry[1]]
    argv += ["--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev"]
    argv += ["--size", str(disk_bytes), "--perms", "01777", "--tmpfs", WORK]
    argv += ["--ro-bind", host_program, PROGRAM, "--remount-ro", "/", "--chdir", WORK]
    argv += ["--clearenv"]
    for key, value in SANDBOX_ENV.items():
        argv += ["--setenv", key, value]
    return [*argv, "--"]


def unshare_command(*, disk_bytes: int, host_program: str, mount_dir: str) -> list[str]:
    """The ``unshare`` argv up to ``--``; the interpreter's argv follows it.

    ``mount_dir`` is an empty host directory; the view is mounted on it inside
    the new mount namespace only, so the host never sees it.
    """
    # unshare kills its child when it dies; setpriv makes it die when we do.
    argv = [_tool("setpriv") or "setpriv", "--pdeathsig", "KILL", "--"]
    argv += [_tool("unshare") or "unshare", "--mount", "--propagation", "private", "--pid"]
    argv += ["--kill-child", "--net", "--ipc", "--uts", "--cgroup", "--"]
    argv += [_tool("sh") or "/bin/sh", "-c", _UNSHARE_SCRIPT, "sh"]
    argv += [mount_dir, str(disk_bytes), host_program]
    for entry in _view():
        argv += list(entry)
    return [*argv, "--"]
