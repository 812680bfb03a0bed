"""Run untrusted (model-written) Python behind an operating-system boundary.

The boundary is the kernel, not the interpreter. Each run gets, on Linux:

* its own PID, mount, network, IPC and UTS namespaces (bubblewrap where it is
  installed, else ``unshare`` when running as root): no view of other
  processes, no network but a loopback device that is down, and when the
  run's first process ends, every process it started dies with the namespace;
* a filesystem view that is read-only except its own directory ``/work``, a
  tmpfs whose size is the disk quota (``SandboxLimits.disk_bytes``); ``/etc``,
  home directories, ``/tmp`` and the repository are not in it;
* a non-root uid that is real outside the namespaces too (a fresh one per run
  when we are root), ``no_new_privs`` and no capabilities;
* ``resource`` limits (CPU, address space, file size, open files, processes)
  and, where this process may create cgroups, a cgroup capping the memory and
  the number of processes of the whole run;
* a fresh session keyring and a seccomp filter refusing the keyring syscalls
  (keyrings are kernel state no namespace separates);
* a wall-clock timeout, after which the whole tree is killed (the namespace,
  the process group and the cgroup).

The audit hook of :mod:`budgetmix.training.envs.sandbox_child` stays as a
second layer that turns blocked actions into readable reasons. See
``docs/security.md`` for the threat model and the guarantees per platform.

Where no boundary can be set up, :func:`run_python` raises
:class:`SandboxUnavailableError`, naming what is missing, unless the caller
passes ``allow_unsafe=True``: then the code runs with the hook, rlimits and the
keyring filter only, never as root (:mod:`~budgetmix.training.envs.sandbox_unsafe`),
and every such run logs a warning.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Literal

from budgetmix._validate import check_int, check_number
from budgetmix.exceptions import BudgetmixError, ConfigError
from budgetmix.training.envs.sandbox_boundary import (
    BOUNDARIES,
    PROGRAM,
    WORK,
    bwrap_command,
    interpreter,
    missing_prerequisite,
    unshare_command,
)
from budgetmix.training.envs.sandbox_cgroup import RunCgroup
from budgetmix.training.envs.sandbox_child import (
    BLOCK_EVENTS,
    BLOCK_IMPORTS,
    BOOTSTRAP,
    KEYRING_FILTER,
)
from budgetmix.training.envs.sandbox_outcome import Ran, exit_status, outcome, read_capped
from budgetmix.training.envs.sandbox_unsafe import (
    SandboxKillError,
    kill_uid,
    unsafe_interpreter,
    unsafe_refusal,
)

__all__ = [
    "LIMIT_CEILINGS",
    "SandboxKillError",
    "SandboxLimits",
    "SandboxResult",
    "SandboxUnavailableError",
    "check_boundary",
    "probe_boundary",
    "run_python",
]

_log = logging.getLogger(__name__)

#: Which boundary a run asks for: the first available (``"auto"``) or one by name.
BoundaryChoice = Literal["auto", "bwrap", "unshare"]

# Fresh uids for runs started by root: above the ranges systemd and container tools use.
_UID_BASE, _UID_SPAN = 0x70000000, 1 << 24


class SandboxUnavailableError(BudgetmixError, RuntimeError):
    """No OS boundary can be set up here, and the caller did not pass ``allow_unsafe=True``.

    Attributes:
        missing: one line per boundary tried, saying what it lacks.
    """

    def __init__(self, missing: Sequence[str], unsafe_refused: str = "") -> None:
        self.missing = tuple(missing)
        what = "no OS sandbox can be set up on this machine (" + "; ".join(self.missing) + ")"
        if unsafe_refused:
            super().__init__(
                f"refusing to run untrusted code: {what}, and allow_unsafe=True cannot run it "
                f"here: {unsafe_refused}. Install bubblewrap (Debian: apt-get install bubblewrap)."
            )
            return
        super().__init__(
            f"refusing to run untrusted code: {what}. Install bubblewrap (Debian: apt-get "
            "install bubblewrap), or pass allow_unsafe=True to run it contained only by an "
            "in-process audit hook and rlimits."
        )


_DAY = 86_400
#: The largest value each :class:`SandboxLimits` field accepts.
LIMIT_CEILINGS: dict[str, float] = {
    "cpu_seconds": _DAY,
    "wall_seconds": _DAY,
    "memory_bytes": 2**40,
    "file_size_bytes": 2**40,
    "open_files": 2**20,  # the kernel's nr_open default
    "max_processes": 2**22,  # the kernel's pid_max ceiling
    "output_chars": 2**26,
    "disk_bytes": 2**40,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxLimits:
    """Resource limits of one sandboxed run.

    Each field has a ceiling (:data:`LIMIT_CEILINGS`: a day of CPU or wall time, 1 TiB
    of memory, file size or disk, ...), so a limit that cannot bind (``wall_seconds=1e300``)
    is refused rather than accepted as "never".

    Raises:
        ConfigError: a limit that is not a positive integer (``wall_seconds``: not a
            positive number) or is over its ceiling; the field is named.
    """

    cpu_seconds: int = 5
    wall_seconds: float = 10.0
    #: ``RLIMIT_AS`` of each process; the run's cgroup caps all of them together at
    #: ``memory_bytes + disk_bytes`` (its files live in memory).
    memory_bytes: int = 512 * 2**20
    file_size_bytes: int = 2 * 2**20
    open_files: int = 64
    #: Processes and threads of the run (``RLIMIT_NPROC`` of its uid, and its cgroup).
    max_processes: int = 16
    #: Characters of stdout and of stderr returned (the rest is dropped).
    output_chars: int = 64_000
    #: Size of the run's directory, all files together (a tmpfs).
    disk_bytes: int = 32 * 2**20

    def __post_init__(self) -> None:
        for name, ceiling in LIMIT_CEILINGS.items():
            field = f"SandboxLimits.{name}"
            if name == "wall_seconds":
                value = check_number(field, self.wall_seconds, positive=True, maximum=ceiling)
                object.__setattr__(self, name, value)
            else:
                check_int(field, getattr(self, name), minimum=1, maximum=int(ceiling))


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxResult:
    """What a sandboxed run did.

    ``ok`` is True when the program exited with status 0 in time. ``reason`` is
    empty then; otherwise one of ``"timeout after Ns"``, ``"cpu time limit"``,
    ``"memory limit"``, ``"file size limit"``, ``"disk limit"``,
    ``"blocked: <what>"``, ``"killed by <signal>"``, ``"sandbox setup failed:
    <why>"`` or ``"exit code N: <last stderr line>"``. ``boundary`` names what
    contained the run: ``"bwrap"``, ``"unshare"`` or ``"none"`` (``allow_unsafe``).
    """

    ok: bool
    returncode: int | None
    stdout: str
    stderr: str
    reason: str = ""
    timed_out: bool = False
    truncated: bool = False
    boundary: str = ""


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


@dataclass(frozen=True, slots=True)
class _Launch:
    """How to start one run: the argv before the interpreter's, and where things are inside."""

    argv: list[str]
    work: str
    program: str
    #: The uid and gid the bootstrap drops to (``None``: it stays who it is).
    ids: tuple[int, int] | None


def _launch(boundary: str | None, root: str, lim: SandboxLimits) -> _Launch:
    """The command for ``boundary`` (``None``: the unsafe fallback), given the run directory."""
    host_program = os.path.join(root, "main.py")
    as_root = os.geteuid() == 0
    fresh = _UID_BASE + secrets.randbelow(_UID_SPAN)
    ids = (fresh, fresh) if as_root else None
    if boundary == "bwrap":
        argv = bwrap_command(disk_bytes=lim.disk_bytes, host_program=host_program, as_root=as_root)
        return _Launch(argv, WORK, PROGRAM, ids)
    if boundary == "unshare":
        mount_dir = os.path.join(root, "view")
        os.mkdir(mount_dir)
        argv = unshare_command(
            disk_bytes=lim.disk_bytes, host_program=host_program, mount_dir=mount_dir
        )
        return _Launch(argv, WORK, PROGRAM, ids)
    work = os.path.join(root, "work")
    os.mkdir(work)
    program = os.path.join(work, "main.py")
    shutil.copyfile(host_program, program)
    if ids is not None:  # as root: the run's own uid (unsafe_refusal allowed it)
        os.chmod(root, 0o711)  # it may enter work/ but not read our output files
        for path in (work, program):
            os.chown(path, *ids)
    return _Launch([], work, program, ids)


def _config(launch: _Launch, lim: SandboxLimits, ready_fd: int, confined: bool) -> str:
    """The bootstrap's settings, as its JSON argument."""
    cfg = {
        "cpu": lim.cpu_seconds,
        "mem": lim.memory_bytes,
        "fsize": lim.file_size_bytes,
        "nofile": lim.open_files,
        "nproc": lim.max_processes,
        "uid": launch.ids[0] if launch.ids else None,
        "gid": launch.ids[1] if launch.ids else None,
        "need_unprivileged": confined or launch.ids is not None,
        "work": launch.work,
        "program": launch.program,
        "ready_fd": ready_fd,
        "block_imports": BLOCK_IMPORTS,
        "block_events": BLOCK_EVENTS,
        "seccomp": KEYRING_FILTER,
    }
    return json.dumps(cfg)


# Joins the cgroups whose `cgroup.procs` files follow the count, then becomes the boundary,
# so that every process of the run is in them from its start.
_JOIN = (
    'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; '
    'n=$((n - 1)); done; exec "$@"'
)
_HOST_ENV = {"LANG": "C.UTF-8", "PATH": "/usr/bin:/bin"}
_PROBE_LIMITS = SandboxLimits(cpu_seconds=5, wall_seconds=20.0)


def _command(
    boundary: str | None, launch: _Launch, cfg: str, cgroup: RunCgroup | None
) -> list[str]:
    if boundary is not None:
        python = interpreter().executable
    else:
        python = (unsafe_interpreter() if launch.ids else None) or sys.executable
    argv = [*launch.argv, python, "-I", "-S", "-c", BOOTSTRAP, cfg]
    if cgroup is None:
        return argv
    files = cgroup.procs_files
    return ["/bin/sh", "-c", _JOIN, "sh", str(len(files)), *files, *argv]


def _was_ready(fd: int) -> bool:
    os.set_blocking(fd, False)
    try:
        return os.read(fd, 1) == b"1"
    except BlockingIOError:
        return False


def _spawn_and_wait(
    argv: list[str],
    cwd: str,
    out: IO[bytes],
    err: IO[bytes],
    ready_w: int,
    lim: SandboxLimits,
    cgroup: RunCgroup | None,
    own_uid: int | None,
) -> Ran:
    """Start the run, wait for it up to the wall clock, kill what is left (with
    ``own_uid``, the unsafe fallback's fresh uid: every process of it)."""
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=err,
        start_new_session=True,
        env=_HOST_ENV,
        pass_fds=(ready_w,),
    )
    timed_out = not _wait_unreaped(proc.pid, lim.wall_seconds)
    cpu = cgroup.cpu_seconds() if timed_out and cgroup is not None else 0.0
    # Kill the whole group either way, so leftovers of a finished run die too. The child
    # is not reaped yet (WNOWAIT), so its pid, and the group id, cannot be reused.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    if cgroup is not None:
        cgroup.kill_all()
    try:
        if own_uid is not None:
            kill_uid(own_uid)
    finally:
        returncode = proc.wait()
    return Ran(returncode, timed_out, cpu, lim.cpu_seconds, lim.wall_seconds)


def _execute(
    code: str, lim: SandboxLimits, boundary: str | None, *, use_cgroup: bool = True
) -> SandboxResult:
    """One run of ``code`` inside ``boundary`` (``None``: the unsafe fallback)."""
    root = os.path.realpath(tempfile.mkdtemp(prefix="budgetmix-sandbox-"))
    ready_r, ready_w = os.pipe()
    cgroup: RunCgroup | None = None
    try:
        with open(os.path.join(root, "main.py"), "w", encoding="utf-8") as f:
            f.write(code)
        launch = _launch(boundary, root, lim)
        if boundary is not None and use_cgroup:
            cgroup = RunCgroup.create(
                memory_bytes=lim.memory_bytes + lim.disk_bytes, max_pids=lim.max_processes + 2
            )
        argv = _command(
            boundary, launch, _config(launch, lim, ready_w, boundary is not None), cgroup
        )
        out_path, err_path = os.path.join(root, "stdout"), os.path.join(root, "stderr")
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            own_uid = launch.ids[0] if boundary is None and launch.ids else None
            cwd = launch.work if boundary is None else root
            run = _spawn_and_wait(argv, cwd, out, err, ready_w, lim, cgroup, own_uid)
        stdout, cut_out = read_capped(out_path, lim.output_chars)
        stderr, cut_err = read_capped(err_path, lim.output_chars)
        ready = _was_ready(ready_r)
        rc = exit_status(run.returncode, boundary)
        reason = outcome(rc, stderr, run, ready, cgroup)
        timed_out = reason.startswith("timeout")
        return SandboxResult(
            ok=rc == 0 and ready and not run.timed_out,
            returncode=None if run.timed_out else rc,
            stdout=stdout,
            stderr=stderr,
            reason=reason,
            timed_out=timed_out,
            truncated=cut_out or cut_err,
            boundary=boundary or "none",
        )
    finally:
        os.close(ready_r)
        os.close(ready_w)
        if cgroup is not None:
            cgroup.remove()
        shutil.rmtree(root, ignore_errors=True)


@functools.cache
def probe_boundary(name: str) -> str:
    """What boundary ``name`` lacks on this machine, ``""`` when it works.

    Checks the prerequisites, then runs a trivial program through the whole
    boundary; the answer is kept for the life of the process.
    """
    missing = missing_prerequisite(name)
    if missing:
        return missing
    try:
        trial = _execute("print('ok')", _PROBE_LIMITS, name, use_cgroup=False)
    except OSError as exc:
        return f"{name}: could not start: {exc}"
    if trial.ok and trial.stdout == "ok\n":
        return ""
    return f"{name}: a trial run failed ({trial.reason or 'wrong output'})"


def check_boundary(boundary: BoundaryChoice = "auto") -> str:
    """The boundary runs will use: the first of ``bwrap``, ``unshare`` that works, or the one named.

    Raises:
        ConfigError: ``boundary`` is not ``"auto"``, ``"bwrap"`` or ``"unshare"``.
        SandboxUnavailableError: none works here (the message says what each lacks).
    """
    if boundary == "auto":
        names: tuple[str, ...] = BOUNDARIES
    elif boundary in BOUNDARIES:
        names = (boundary,)
    else:
        raise ConfigError(f"boundary: must be 'auto', 'bwrap' or 'unshare', got {boundary!r}")
    missing = []
    for name in names:
        why = probe_boundary(name)
        if not why:
            return name
        missing.append(why)
    raise SandboxUnavailableError(missing)


def run_python(
    code: str,
    *,
    limits: SandboxLimits | None = None,
    drop_privileges: bool | None = None,
    allow_unsafe: bool = False,
    boundary: BoundaryChoice = "auto",
) -> SandboxResult:
    """Run ``code`` as ``__main__`` in a fresh sandboxed interpreter and wait for it.

    The code is written to ``/work/main.py`` inside the run's view, so
    tracebacks show its lines. ``boundary`` picks the OS boundary (default: the
    first that works, see :func:`check_boundary`). ``allow_unsafe=True`` lets
    the code run where none works, contained only by the audit hook and
    rlimits, with a warning logged for each run. It never runs the code as root:
    as root each unsafe run drops to a fresh uid of its own (with an interpreter
    that uid can read: this one, else the system's ``python3``), and every process
    of that uid is killed after the run; where that is impossible, or
    ``drop_privileges=False`` is passed, the run is refused. ``drop_privileges``
    (``None`` or ``True``: drop) matters only there. Never raises for anything the
    code does (the failure is in the result), except a process of an unsafe run that
    no SIGKILL ends.

    Raises:
        SandboxUnavailableError: no boundary works here and ``allow_unsafe`` is False,
            or the unsafe fallback would run as root (the message says why).
        SandboxKillError: a process of an unsafe run's uid was still alive 10 s after
            the run (stuck in the kernel); the run's containment did not hold.
        ConfigError: an unknown ``boundary``.
    """
    lim = limits or SandboxLimits()
    chosen: str | None
    try:
        chosen = check_boundary(boundary)
    except SandboxUnavailableError as exc:
        if not allow_unsafe:
            raise
        refused = unsafe_refusal(drop_privileges)
        if refused:
            raise SandboxUnavailableError(exc.missing, unsafe_refused=refused) from None
        _log.warning(
            "running untrusted code without an OS sandbox (allow_unsafe=True): %s",
            "; ".join(exc.missing),
        )
        chosen = None
    return _execute(code, lim, chosen)
