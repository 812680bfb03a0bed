"""Kernel state a sandboxed run must not share with its caller (issue 30): keyrings.

The caller plants a key in a fresh session keyring of its own (as any PAM login or
``keyctl new_session`` does), then runs hostile code in every boundary this machine
has. The code switches the audit hook off and tries to read the key (``request_key``
+ ``KEYCTL_READ``, a search of the session keyring, ``/proc/keys``) and to plant one
of its own in the caller's session keyring. The caller then looks for the planted key.
Each test fails if either attack succeeds. The caller's side runs in a child process,
so that pytest's own session keyring is left alone.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid

import pytest

pytestmark = pytest.mark.timeout(90)

# The raw syscalls (x86_64 and aarch64 numbers), as model-written code would use them.
KEYCTL = textwrap.dedent(
    """
    import ctypes, os, platform
    _libc = ctypes.CDLL(None, use_errno=True)
    _libc.syscall.restype = ctypes.c_long
    _NR = {"x86_64": (248, 249, 250), "aarch64": (217, 218, 219)}[platform.machine()]
    SESSION = -3
    def add_key(desc, payload, ring=SESSION):
        return _libc.syscall(_NR[0], b"user", desc.encode(), payload, len(payload), ring)
    def request_key(desc):
        return _libc.syscall(_NR[1], b"user", desc.encode(), None, 0)
    def keyctl(*args):
        return _libc.syscall(_NR[2], *args)
    def search(desc, ring=SESSION):
        return keyctl(10, ring, b"user", desc.encode(), 0)  # KEYCTL_SEARCH
    def read(key):
        buf = ctypes.create_string_buffer(4096)
        n = keyctl(11, key, buf, 4096)  # KEYCTL_READ
        return buf.raw[: max(n, 0)]
    def errno():
        return os.strerror(ctypes.get_errno())
    """
)

HOOK_OFF = (
    "import sys; sys.modules['__main__']._hook.__code__ = (lambda event, args: None).__code__\n"
    "import socket\n"
    "print('HOOK-OFF', flush=True)\n"
)

# Inside the sandbox: every way to the caller's key, and a key planted for the caller.
ATTACK = textwrap.dedent(
    """
    found = []
    for key in (request_key(DESC), search(DESC)):
        if key > 0:
            found.append(read(key))
    print("READ", found, errno(), flush=True)
    try:
        print("PROC-KEYS", open("/proc/keys").read(), flush=True)
    except OSError as exc:
        print("PROC-KEYS unreadable", exc, flush=True)
    print("PLANTED", add_key(PLANT, b"planted-by-the-sandbox"), errno(), flush=True)
    """
)

# The caller: a fresh session keyring holding a secret, a sandboxed run, then a look
# for what the run planted.
CALLER = textwrap.dedent(
    """
    import json, sys
    from budgetmix.training.envs.sandbox import SandboxLimits, run_python
    secret, desc, plant, boundary, attack = sys.argv[1:6]
    assert keyctl(1, b"budgetmix-test-session") > 0, errno()  # KEYCTL_JOIN_SESSION_KEYRING
    own = add_key(desc, secret.encode())
    assert own > 0 and read(request_key(desc)) == secret.encode(), errno()
    result = run_python(attack, boundary=boundary, limits=SandboxLimits(wall_seconds=20.0))
    planted = search(plant)
    print(json.dumps({
        "stdout": result.stdout, "stderr": result.stderr, "reason": result.reason,
        "boundary": result.boundary, "planted": planted > 0,
        "planted_payload": read(planted).decode() if planted > 0 else "",
        "still_ours": read(search(desc)).decode(),
    }))
    """
)


def _keyrings_usable() -> str:
    """Why this machine cannot run the test (a container profile may deny keyctl)."""
    probe = KEYCTL + "print(keyctl(1, None) > 0, errno())\n"  # a new anonymous session keyring
    try:
        out = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot probe keyctl: {exc}"
    if out.stdout.startswith("True"):
        return ""
    return f"the kernel keyring syscalls are not usable here: {out.stdout}{out.stderr}".strip()


def test_the_callers_session_keyring_is_neither_readable_nor_writable(boundary: str) -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("kernel keyrings are Linux only")
    why = _keyrings_usable()
    if why:
        pytest.skip(why)
    tag = uuid.uuid4().hex
    secret, desc, plant = f"sk-budgetmix-keyring-{tag}", f"bm-secret-{tag}", f"bm-plant-{tag}"
    attack = HOOK_OFF + KEYCTL + f"DESC, PLANT = {desc!r}, {plant!r}\n" + ATTACK
    out = subprocess.run(
        [sys.executable, "-c", KEYCTL + CALLER, secret, desc, plant, boundary, attack],
        capture_output=True,
        text=True,
        timeout=80,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.splitlines()[-1])
    assert seen["boundary"] == boundary
    assert "HOOK-OFF" in seen["stdout"], seen  # the OS layer alone was tested
    assert "READ" in seen["stdout"] and "PLANTED" in seen["stdout"], seen  # the attack ran
    assert secret not in seen["stdout"] + seen["stderr"], "the run read the caller's key"
    assert desc not in seen["stdout"].split("PROC-KEYS", 1)[1], "the run saw the caller's key"
    assert not seen["planted"], f"the run planted a key for the caller: {seen}"
    assert seen["still_ours"] == secret  # the caller's own keyring still works
