"""The sandbox contains runaway, hostile-looking and careless code."""

from __future__ import annotations

import os
import uuid

import pytest
from budgetmix.exceptions import ConfigError
from budgetmix.training.envs import SandboxLimits, run_python

FAST = SandboxLimits(cpu_seconds=1, wall_seconds=3.0, memory_bytes=256 * 2**20)


def test_ok_program() -> None:
    result = run_python("print('hello')", limits=FAST)
    assert result.ok and result.returncode == 0 and result.stdout == "hello\n"
    assert result.reason == ""
    assert result.boundary in ("bwrap", "unshare")  # an OS boundary, not the unsafe fallback


def test_the_run_sees_only_its_own_view() -> None:
    code = "import os\nprint(os.getcwd(), sorted(os.listdir('/')), os.path.exists('/etc'))"
    result = run_python(code, limits=FAST)
    assert result.stdout.startswith("/work ") and result.stdout.rstrip().endswith("False")
    assert "home" not in result.stdout and "tmp" not in result.stdout


def test_writes_inside_the_temp_dir_are_allowed() -> None:
    code = "open('x.txt', 'w').write('data')\nprint(open('x.txt').read())"
    assert run_python(code, limits=FAST).stdout == "data\n"


def test_infinite_loop_hits_the_cpu_limit() -> None:
    # a wall clock far past the CPU second, so that a busy machine cannot make it bind
    limits = SandboxLimits(cpu_seconds=1, wall_seconds=30.0, memory_bytes=256 * 2**20)
    result = run_python("while True:\n    pass", limits=limits)
    assert not result.ok and result.reason == "cpu time limit"


def test_sleeping_forever_hits_the_wall_clock() -> None:
    limits = SandboxLimits(cpu_seconds=5, wall_seconds=0.5)
    result = run_python("import time\ntime.sleep(60)", limits=limits)
    assert result.timed_out and not result.ok and result.reason.startswith("timeout")


@pytest.mark.parametrize(
    "code",
    [
        "import os\nwhile True:\n    os.fork()",
        "import subprocess\nsubprocess.run(['true'])",
        "import os\nos.system('true')",
        "import os\nos.execv('/bin/true', ['true'])",
    ],
)
def test_fork_bombs_and_subprocesses_are_blocked(code: str) -> None:
    result = run_python(code, limits=FAST)
    assert not result.ok and result.reason.startswith("blocked:")


def test_huge_allocation_hits_the_memory_limit() -> None:
    result = run_python("x = bytearray(8 * 1024**3)", limits=FAST)
    assert not result.ok and result.reason == "memory limit"


def test_writing_outside_the_temp_dir_is_blocked() -> None:
    target = f"/tmp/budgetmix-sandbox-escape-{uuid.uuid4().hex}"
    result = run_python(f"open({target!r}, 'w').write('x')", limits=FAST)
    assert not result.ok and "outside the sandbox directory" in result.reason
    assert not os.path.exists(target)
    result = run_python("import os\nos.remove('/etc/hostname')", limits=FAST)
    assert result.reason.startswith("blocked: os.remove")


@pytest.mark.parametrize(
    "code",
    ["import socket\nsocket.create_connection(('127.0.0.1', 9))", "import urllib.request"],
)
def test_network_is_blocked(code: str) -> None:
    result = run_python(code, limits=FAST)
    assert not result.ok and result.reason.startswith("blocked: import")


def test_raising_limits_and_signalling_are_blocked() -> None:
    code = "import resource\nresource.setrlimit(resource.RLIMIT_CPU, (100, 100))"
    assert run_python(code, limits=FAST).reason == "blocked: resource.setrlimit"
    assert run_python("import os\nos.kill(1, 0)", limits=FAST).reason == "blocked: os.kill"


def test_output_is_capped() -> None:
    limits = SandboxLimits(cpu_seconds=1, wall_seconds=3.0, output_chars=100)
    result = run_python("print('x' * 10000)", limits=limits)
    assert result.ok and result.truncated and len(result.stdout) == 100


def test_file_size_limit() -> None:
    limits = SandboxLimits(cpu_seconds=2, wall_seconds=3.0, file_size_bytes=1 << 16)
    result = run_python("while True:\n    print('x' * 1000)", limits=limits)
    assert not result.ok and result.reason == "file size limit"


def test_exception_reason_has_last_line() -> None:
    result = run_python("assert 1 == 2, 'nope'", limits=FAST)
    assert result.reason == "exit code 1: AssertionError: nope"
    assert "main.py" in result.stderr


def test_limits_validate() -> None:
    with pytest.raises(ConfigError, match="wall_seconds"):
        SandboxLimits(wall_seconds=0)
    with pytest.raises(ConfigError, match="disk_bytes"):
        SandboxLimits(disk_bytes=0)
