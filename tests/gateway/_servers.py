"""Servers the gateway tests start and stop themselves, on loopback ports."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


class RedisProcess:
    """``redis-server`` on a loopback port, no persistence; stop() and start() again."""

    def __init__(self, persist_dir: Path | None = None) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            pytest.skip("redis-server is not installed (scripts/bootstrap.sh installs it)")
        pytest.importorskip("redis", reason="the redis client is the budgetmix[redis] extra")
        self.exe = exe
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        # with a folder: every write on disk before it is answered (kill -9 loses nothing)
        self.persist = ["--appendonly", "yes", "--appendfsync", "always", "--dir",
                        str(persist_dir)] if persist_dir is not None else ["--appendonly", "no"]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisProcess:
        self.proc = subprocess.Popen(
            [self.exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--protected-mode", "no", *self.persist],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        wait_port(self.port)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None


REPO = Path(__file__).resolve().parents[2]


def python_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("OTEL_TRACES_EXPORTER", None)
    return env


def run_python(code: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout,
        env=python_env(), cwd=REPO, check=False,
    )


class GatewayProcess:
    """``budgetmix gateway --config FILE --port P`` in a process of its own (the README's
    one command)."""

    def __init__(self, config_file: Path, *extra: str) -> None:
        self.log = config_file.with_name(f"gateway-{id(self)}.log")
        self.port = free_port()
        self.args = [sys.executable, "-m", "budgetmix.cli", "gateway", "--config",
                     str(config_file), "--port", str(self.port), *extra]
        self.proc: subprocess.Popen[str] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> GatewayProcess:
        with self.log.open("w") as out:  # a file: a pipe nobody reads would fill and block it
            self.proc = subprocess.Popen(self.args, stdout=out, stderr=subprocess.STDOUT,
                                         text=True, env=python_env(), cwd=REPO)
        return self

    def wait(self) -> GatewayProcess:
        try:
            wait_port(self.port, timeout=60)
        except TimeoutError:
            self.stop()
            assert self.proc is not None
            raise AssertionError(f"the gateway did not start: {self.log.read_text()}") from None
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
