"""Choosing the OS boundary: refusal where there is none, ``allow_unsafe``, setup failures.

Absence is simulated (a patched probe or tool lookup), never made by breaking the machine.
"""

from __future__ import annotations

import logging
import os

import pytest
from budgetmix.exceptions import ConfigError
from budgetmix.training.envs import HumanEvalEnv, sandbox, sandbox_boundary
from budgetmix.training.envs.sandbox import (
    SandboxLimits,
    SandboxUnavailableError,
    check_boundary,
    probe_boundary,
    run_python,
)
from budgetmix.training.envs.sandbox_boundary import missing_prerequisite
from budgetmix.training.envs.sandbox_cgroup import cgroup_mounts

pytestmark = pytest.mark.timeout(60)

FAST = SandboxLimits(cpu_seconds=1, wall_seconds=5.0, memory_bytes=256 * 2**20)
TOY = {
    "toy/0": {
        "task_id": "toy/0",
        "prompt": 'def add(a: int, b: int) -> int:\n    """Add."""\n',
        "canonical_solution": "    return a + b\n",
        "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n",
        "entry_point": "add",
    }
}


@pytest.fixture
def no_boundary(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox, "probe_boundary", lambda name: f"{name}: simulated absence")


@pytest.mark.usefixtures("no_boundary")
def test_refuses_untrusted_code_without_a_boundary() -> None:
    with pytest.raises(SandboxUnavailableError) as info:
        run_python("print('ran')", limits=FAST)
    message = str(info.value)
    assert "bwrap: simulated absence" in message and "unshare: simulated absence" in message
    assert "apt-get install bubblewrap" in message and "allow_unsafe=True" in message
    assert info.value.missing == ("bwrap: simulated absence", "unshare: simulated absence")


@pytest.mark.usefixtures("no_boundary")
def test_allow_unsafe_runs_and_logs_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="budgetmix.training.envs.sandbox"):
        result = run_python("print('ran')", limits=FAST, allow_unsafe=True)
    assert result.ok and result.stdout == "ran\n" and result.boundary == "none"
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "without an OS sandbox" in warnings[0].getMessage()
    assert "bwrap: simulated absence" in warnings[0].getMessage()


def test_allow_unsafe_still_uses_a_boundary_where_there_is_one(
    boundary: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="budgetmix.training.envs.sandbox"):
        result = run_python("print('ran')", limits=FAST, allow_unsafe=True, boundary=boundary)
    assert result.ok and result.boundary == boundary
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.usefixtures("no_boundary")
def test_humaneval_refuses_or_runs_unsafe_when_asked(caplog: pytest.LogCaptureFixture) -> None:
    env = HumanEvalEnv(problems=TOY, limits=FAST)
    env.reset(0)
    with pytest.raises(SandboxUnavailableError):
        env.step("```python\ndef add(a, b):\n    return a + b\n```")
    unsafe = HumanEvalEnv(problems=TOY, limits=FAST, allow_unsafe=True)
    unsafe.reset(0)
    with caplog.at_level(logging.WARNING, logger="budgetmix.training.envs.sandbox"):
        step = unsafe.step("```python\ndef add(a, b):\n    return a + b\n```")
    assert step.success and unsafe.last_run is not None and unsafe.last_run.boundary == "none"
    assert any("without an OS sandbox" in r.getMessage() for r in caplog.records)


def test_missing_prerequisites_name_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real_tool = sandbox_boundary._tool
    monkeypatch.setattr(
        sandbox_boundary, "_tool", lambda name: None if name == "bwrap" else real_tool(name)
    )
    assert "bubblewrap is not installed" in missing_prerequisite("bwrap")
    assert "apt-get install bubblewrap" in missing_prerequisite("bwrap")
    monkeypatch.setattr(sandbox_boundary.os, "geteuid", lambda: 1000)
    assert "unshare: needs root (running as uid 1000)" in missing_prerequisite("unshare")
    monkeypatch.setattr(sandbox_boundary.sys, "platform", "darwin")
    assert missing_prerequisite("bwrap") == "bwrap: needs Linux namespaces (this is darwin)"


def test_unknown_boundary_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="boundary"):
        check_boundary("docker")


def test_a_boundary_that_cannot_be_set_up_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    if missing_prerequisite("bwrap"):
        if os.environ.get("CI"):
            pytest.fail("CI must have bwrap (scripts/bootstrap.sh installs it)")
        pytest.skip("bwrap is not installed")
    monkeypatch.setattr(
        sandbox,
        "bwrap_command",
        lambda **_: ["/bin/sh", "-c", "echo 'bwrap: simulated failure' >&2; exit 1", "sh"],
    )
    why = probe_boundary.__wrapped__("bwrap")
    assert why == "bwrap: a trial run failed (sandbox setup failed: bwrap: simulated failure)"
    monkeypatch.setattr(sandbox, "probe_boundary", lambda name: "")
    result = run_python("print('ran')", limits=FAST, boundary="bwrap")
    assert not result.ok and result.reason == "sandbox setup failed: bwrap: simulated failure"


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        ("while True:\n    pass", "cpu time limit"),
        ("x = bytearray(8 * 1024**3)", "memory limit"),
        ("import time\ntime.sleep(60)", "timeout after 1.5s"),
        ("open('big', 'wb').write(b'x' * (4 << 20))", "file size limit"),
        ("[open(f'f{i}', 'wb').write(b'x' * (1 << 20)) for i in range(12)]", "disk limit"),
        ("import sys\nsys.exit(3)", "exit code 3: "),
    ],
)
@pytest.mark.slow
def test_limits_read_the_same_in_every_boundary(boundary: str, code: str, reason: str) -> None:
    # Only the sleeper meets the wall clock; the others hit their own limit long before.
    wall = 1.5 if "sleep" in code else 20.0
    limits = SandboxLimits(
        cpu_seconds=1, wall_seconds=wall, file_size_bytes=2 << 20, disk_bytes=8 << 20
    )
    result = run_python(code, limits=limits, boundary=boundary)
    assert not result.ok and result.reason == reason, result.stderr


def test_no_cgroup_is_left_behind(boundary: str) -> None:
    def leftovers() -> set[str]:
        found = set()
        for point, _ in cgroup_mounts().values():
            for top, dirs, _files in os.walk(point):
                found.update(os.path.join(top, d) for d in dirs if "budgetmix-sandbox-" in d)
        return found

    before = leftovers()
    run_python("import os\nos.fork()", limits=FAST, boundary=boundary)
    assert leftovers() <= before
