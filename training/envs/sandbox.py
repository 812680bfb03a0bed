"""Run untrusted (model-written) Python in a separate, limited process.

Layers, outermost first:

* a separate interpreter, ``python -I -S`` (no environment variables, no user or
  site packages: standard library only), in a new session so the whole process
  group can be killed; a wall-clock timeout kills it;
* a fresh temporary directory as the working directory, removed afterwards;
* ``resource`` limits set before any user code runs: CPU seconds
  (``RLIMIT_CPU``), address space (``RLIMIT_AS``), file size (``RLIMIT_FSIZE``,
  which also caps stdout/stderr, since they go to files), open files
  (``RLIMIT_NOFILE``), processes (``RLIMIT_NPROC``) and no core dumps;
* when the host runs as root, the child drops to the ``nobody`` user
  (``RLIMIT_NPROC`` is not enforced for root, and file permissions then apply)
  -- but only where ``nobody`` can read the standard library (not when Python
  lives under a private home such as ``/root/.pyenv``); otherwise it stays
  root and relies on the layers below;
* an audit hook (:pep:`578`) installed before the user code that refuses:
  process creation (``os.fork``, ``os.exec*``, ``os.system``, ``subprocess``,
  ``posix_spawn``), signals to other processes, any ``socket`` use and the
  imports of ``socket``, ``ssl``, ``ctypes``, ``_posixsubprocess`` and friends,
  ``resource.setrlimit``, and writes, renames, deletions or permission changes
  outside the temporary directory.

Honest limits: audit hooks are not a security boundary. They see paths, not
``dir_fd`` tricks; C extensions or interpreter bugs can get around them; a
process that escapes its group with ``setsid`` survives the group kill. This
contains buggy and careless code (infinite loops, fork bombs, huge
allocations, stray writes, network calls); for adversarial code run the whole
evaluation in a container or VM with no network.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from budgetmix.exceptions import ConfigError

__all__ = ["SandboxLimits", "SandboxResult", "run_python"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxLimits:
    """Resource limits of one sandboxed run.

    Raises:
        ConfigError: a limit that is not positive (the field is named).
    """

    cpu_seconds: int = 5
    wall_seconds: float = 10.0
    memory_bytes: int = 512 * 2**20
    file_size_bytes: int = 2 * 2**20
    open_files: int = 64
    #: ``RLIMIT_NPROC`` of the child's user (counts all its processes and threads).
    max_processes: int = 16
    #: Characters of stdout and of stderr returned (the rest is dropped).
    output_chars: int = 64_000

    def __post_init__(self) -> None:
        for name in (
            "cpu_seconds",
            "wall_seconds",
            "memory_bytes",
            "file_size_bytes",
            "open_files",
            "max_processes",
            "output_chars",
        ):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name}: must be > 0, got {getattr(self, name)}")


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxResult:
    """What a sandboxed run did.

    ``ok`` is True when the program exited with status 0 in time. ``reason`` is
    empty then; otherwise one of ``"timeout"``, ``"cpu time limit"``,
    ``"memory limit"``, ``"file size limit"``, ``"blocked: <what>"``,
    ``"killed by <signal>"`` or ``"exit code N: <last stderr line>"``.
    """

    ok: bool
    returncode: int | None
    stdout: str
    stderr: str
    reason: str = ""
    timed_out: bool = False
    truncated: bool = False


# Runs in the child before the user code: limits, privilege drop, audit hook.
_BOOTSTRAP = r"""
import json, os, resource, sys
_cfg = json.loads(sys.argv[1])
def _lim(kind, soft, hard=None):
    resource.setrlimit(kind, (soft, soft if hard is None else hard))
_lim(resource.RLIMIT_CPU, _cfg["cpu"], _cfg["cpu"] + 1)
_lim(resource.RLIMIT_AS, _cfg["mem"])
_lim(resource.RLIMIT_FSIZE, _cfg["fsize"])
_lim(resource.RLIMIT_NOFILE, _cfg["nofile"])
_lim(resource.RLIMIT_CORE, 0)
_lim(resource.RLIMIT_NPROC, _cfg["nproc"])
if _cfg["uid"] is not None:
    os.setgroups([])
    os.setgid(_cfg["gid"])
    os.setuid(_cfg["uid"])
_work = _cfg["work"]
os.chdir(_work)
with open(_cfg["program"], "rb") as _f:
    _code = compile(_f.read(), _cfg["program"], "exec")
_WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_IMPORTS = frozenset(_cfg["block_imports"])
_EVENTS = frozenset(_cfg["block_events"])
_PATHS = {"os.remove": 1, "os.rmdir": 1, "os.mkdir": 1, "os.chmod": 1, "os.chown": 1,
          "os.rename": 2, "os.truncate": 1, "os.utime": 1, "shutil.rmtree": 1,
          "os.chflags": 1, "os.setxattr": 1, "os.removexattr": 1}
_abspath, _fspath, _sep = os.path.abspath, os.fspath, os.sep
def _inside(p):
    if isinstance(p, int):
        return True
    try:
        p = _fspath(p)
    except TypeError:
        return False
    if isinstance(p, bytes):
        p = p.decode("utf-8", "surrogateescape")
    p = _abspath(p)
    return p == _work or p.startswith(_work + _sep)
def _deny(what):
    raise PermissionError("[sandbox] blocked: " + what)
def _hook(event, args):
    if event == "open":
        path, mode, flags = args
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & _WRITE)
        if writing and not _inside(path):
            _deny("writing outside the sandbox directory: %r" % (path,))
    elif event == "import":
        if args[0] and args[0].split(".")[0] in _IMPORTS:
            _deny("import " + args[0])
    elif event in _EVENTS or event.startswith("socket."):
        _deny(event)
    elif event in _PATHS:
        for p in args[: _PATHS[event]]:
            if not _inside(p):
                _deny(event + " outside the sandbox directory: %r" % (p,))
sys.argv = [_cfg["program"]]
sys.addaudithook(_hook)
del _f, _lim
exec(_code, {"__name__": "__main__", "__file__": _cfg["program"], "__builtins__": __builtins__})
"""

_BLOCK_IMPORTS = (
    "socket",
    "_socket",
    "ssl",
    "_ssl",
    "ctypes",
    "_ctypes",
    "_posixsubprocess",
    "subprocess",
    "multiprocessing",
    "_multiprocessing",
    "asyncio",
    "urllib",
    "http",
    "ftplib",
    "smtplib",
    "pty",
)
_BLOCK_EVENTS = (
    "os.fork",
    "os.forkpty",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.system",
    "os.startfile",
    "subprocess.Popen",
    "os.kill",
    "os.killpg",
    "signal.pthread_kill",
    "resource.setrlimit",
    "resource.prlimit",
    "ctypes.dlopen",
    "ctypes.dlsym",
    "os.symlink",
    "os.link",
    "os.mkfifo",
    "os.mknod",
    "mmap.__new__",
)
_SIGNAL_REASONS = {
    signal.SIGXCPU: "cpu time limit",
    signal.SIGXFSZ: "file size limit",
}


def _stdlib_readable_by_others() -> bool:
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


def _nobody(drop: bool | None) -> tuple[int, int] | None:
    if drop is False or os.geteuid() != 0:
        return None
    if drop is None and not _stdlib_readable_by_others():
        return None
    import pwd

    try:
        entry = pwd.getpwnam("nobody")
    except KeyError:
        return None
    return entry.pw_uid, entry.pw_gid


def _wait_unreaped(pid: int, timeout: float) -> bool:
    """Wait until ``pid`` exits, without reaping it; False on timeout."""
    deadline = time.monotonic() + timeout
    pause = 0.001
    while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        if time.monotonic() >= deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 2, 0.02)
    return True


def _read_capped(path: str, limit: int) -> tuple[str, bool]:
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
    return f"exit code {returncode}: {last}"[:300]


def run_python(
    code: str,
    *,
    limits: SandboxLimits | None = None,
    drop_privileges: bool | None = None,
) -> SandboxResult:
    """Run ``code`` as ``__main__`` in a fresh sandboxed interpreter and wait for it.

    The code is written to ``main.py`` in the temporary directory, so tracebacks
    show its lines. ``drop_privileges`` only matters when the host is root:
    ``None`` (default) drops to ``nobody`` when the standard library is readable
    by other users (otherwise the child could not import it), ``True`` always,
    ``False`` never.
    Never raises for anything the code does; the failure is in the result.
    """
    lim = limits or SandboxLimits()
    root = tempfile.mkdtemp(prefix="budgetmix-sandbox-")
    try:
        work = os.path.join(os.path.realpath(root), "work")
        os.mkdir(work)
        program = os.path.join(work, "main.py")
        with open(program, "w", encoding="utf-8") as f:
            f.write(code)
        ids = _nobody(drop_privileges)
        if ids is not None:
            os.chmod(root, 0o711)  # nobody may enter work/ but not read our output files
            for path in (work, program):
                os.chown(path, *ids)
        cfg = {
            "cpu": lim.cpu_seconds,
            "mem": lim.memory_bytes,
            "fsize": lim.file_size_bytes,
            "nofile": lim.open_files,
            "nproc": lim.max_processes,
            "uid": ids[0] if ids else None,
            "gid": ids[1] if ids else None,
            "work": work,
            "program": program,
            "block_imports": _BLOCK_IMPORTS,
            "block_events": _BLOCK_EVENTS,
        }
        out_path, err_path = os.path.join(root, "stdout"), os.path.join(root, "stderr")
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _BOOTSTRAP, json.dumps(cfg)],
                cwd=work,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
                env={"LANG": "C.UTF-8", "PATH": "/usr/bin:/bin"},
            )
            timed_out = not _wait_unreaped(proc.pid, lim.wall_seconds)
            # Kill the whole group either way, so leftovers of a finished run die too. The
            # child is not reaped yet (WNOWAIT), so its pid, and the group id, cannot be reused.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        stdout, cut_out = _read_capped(out_path, lim.output_chars)
        stderr, cut_err = _read_capped(err_path, lim.output_chars)
        rc = proc.returncode
        if timed_out:
            reason = f"timeout after {lim.wall_seconds:g}s"
        elif rc == 0:
            reason = ""
        else:
            reason = _reason(rc, stderr)
        return SandboxResult(
            ok=rc == 0 and not timed_out,
            returncode=None if timed_out else rc,
            stdout=stdout,
            stderr=stderr,
            reason=reason,
            timed_out=timed_out,
            truncated=cut_out or cut_err,
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
