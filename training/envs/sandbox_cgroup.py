"""A cgroup per sandboxed run: caps the memory and the process count of the whole tree.

The run's cgroup is created *below* the cgroup this process is in (per
controller on cgroup v1, one directory on cgroup v2), so the limits of whoever
runs us still apply on top. Each controller is used where its hierarchy is
writable; where none is (no root, no delegation, macOS), :meth:`RunCgroup.create`
returns ``None`` and the run relies on its rlimits. A process joins by writing
its pid to every file of :attr:`RunCgroup.procs_files` before it ``exec``\\ s
the boundary, so everything it starts is inside from its first instruction.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from dataclasses import dataclass

__all__ = ["RunCgroup", "cgroup_mounts"]

_V1_CONTROLLERS = ("memory", "pids")


def cgroup_mounts() -> dict[str, tuple[str, str]]:
    """Mounted cgroup hierarchies: controller (or ``"unified"``) -> (mount point, mount root)."""
    found: dict[str, tuple[str, str]] = {}
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return found
    for line in lines:
        head, sep, tail = line.partition(" - ")
        fields, extra = head.split(), tail.split()
        if not sep or len(fields) < 5 or len(extra) < 3:
            continue
        root, point, fstype = fields[3], fields[4], extra[0]
        if fstype == "cgroup2":
            found.setdefault("unified", (point, root))
        elif fstype == "cgroup":
            for option in extra[2].split(","):
                if option in _V1_CONTROLLERS:
                    found.setdefault(option, (point, root))
    return found


def _own_paths() -> dict[str, str]:
    """This process's cgroup path per v1 controller, and ``"unified"`` for v2."""
    paths: dict[str, str] = {}
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return paths
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        names = ["unified"] if parts[0] == "0" and not parts[1] else parts[1].split(",")
        for name in names:
            paths[name] = parts[2]
    return paths


def _write(path: str, value: str) -> None:
    with open(path, "w", encoding="ascii") as f:
        f.write(value)


def _child_dir(mount: tuple[str, str], own: str, name: str) -> str:
    point, root = mount
    rel = own[len(root) :] if root != "/" and own.startswith(root) else own
    return os.path.join(point, rel.lstrip("/"), name)


@dataclass(frozen=True, slots=True)
class RunCgroup:
    """The cgroup directories of one run (one per v1 controller, or one v2 directory)."""

    #: Every directory created for the run; a process must join all of them.
    dirs: tuple[str, ...]
    #: The directory holding the memory controller's files, if any.
    memory_dir: str | None
    version: int

    @classmethod
    def create(cls, *, memory_bytes: int, max_pids: int) -> RunCgroup | None:
        """A cgroup capped at ``memory_bytes`` and ``max_pids``; ``None`` if none can be made."""
        name = f"budgetmix-sandbox-{uuid.uuid4().hex[:16]}"
        mounts, own = cgroup_mounts(), _own_paths()
        v1 = [c for c in _V1_CONTROLLERS if c in mounts and c in own]
        if v1:
            return cls._create_v1(v1, mounts, own, name, memory_bytes, max_pids)
        if "unified" in mounts and "unified" in own:
            return cls._create_v2(
                _child_dir(mounts["unified"], own["unified"], name), memory_bytes, max_pids
            )
        return None

    @classmethod
    def _create_v1(
        cls,
        controllers: list[str],
        mounts: dict[str, tuple[str, str]],
        own: dict[str, str],
        name: str,
        memory_bytes: int,
        max_pids: int,
    ) -> RunCgroup | None:
        dirs: list[str] = []
        memory_dir: str | None = None
        for controller in controllers:
            path = _child_dir(mounts[controller], own[controller], name)
            try:
                os.mkdir(path)
            except OSError:
                continue
            try:
                if controller == "memory":
                    _write(os.path.join(path, "memory.limit_in_bytes"), str(memory_bytes))
                    swap = os.path.join(path, "memory.memsw.limit_in_bytes")
                    if os.path.exists(swap):
                        _write(swap, str(memory_bytes))
                    memory_dir = path
                else:
                    _write(os.path.join(path, "pids.max"), str(max_pids))
            except OSError:
                with contextlib.suppress(OSError):
                    os.rmdir(path)
                continue
            dirs.append(path)
        return cls(tuple(dirs), memory_dir, 1) if dirs else None

    @classmethod
    def _create_v2(cls, path: str, memory_bytes: int, max_pids: int) -> RunCgroup | None:
        try:
            os.mkdir(path)
        except OSError:
            return None
        try:
            _write(os.path.join(path, "memory.max"), str(memory_bytes))
            _write(os.path.join(path, "pids.max"), str(max_pids))
            swap = os.path.join(path, "memory.swap.max")
            if os.path.exists(swap):
                _write(swap, "0")
        except OSError:  # the controllers are not enabled for our subtree
            with contextlib.suppress(OSError):
                os.rmdir(path)
            return None
        return cls((path,), path, 2)

    @property
    def procs_files(self) -> tuple[str, ...]:
        """The ``cgroup.procs`` files a process writes its pid to, to join."""
        return tuple(os.path.join(d, "cgroup.procs") for d in self.dirs)

    def oom_killed(self) -> bool:
        """True when the memory limit made the kernel kill a process of the run."""
        if self.memory_dir is None:
            return False
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        try:
            with open(os.path.join(self.memory_dir, name), encoding="ascii") as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill" and value.strip() not in ("", "0"):
                        return True
        except OSError:
            pass
        return False

    def _pids(self) -> set[int]:
        pids: set[int] = set()
        for path in self.procs_files:
            with contextlib.suppress(OSError), open(path, encoding="ascii") as f:
                pids.update(int(p) for p in f.read().split())
        return pids

    def cpu_seconds(self) -> float:
        """CPU time used so far by the run's live processes (and the children they reaped)."""
        total = 0
        for pid in self._pids():
            with contextlib.suppress(OSError, ValueError, IndexError):
                with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                total += sum(int(fields[i]) for i in (11, 12, 13, 14))  # utime .. cstime
        return total / os.sysconf("SC_CLK_TCK")

    def kill_all(self, timeout: float = 2.0) -> bool:
        """SIGKILL every process in the cgroup until it is empty; False if some survived."""
        deadline = time.monotonic() + timeout
        while pids := self._pids():
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)
        return True

    def remove(self) -> None:
        """Kill what is left and remove the directories (retrying while they drain)."""
        self.kill_all()
        for path in self.dirs:
            for _ in range(100):
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)
