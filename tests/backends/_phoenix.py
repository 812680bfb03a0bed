"""A real Arize Phoenix server on loopback for the backend group (``-m backends``).

Phoenix is not installed beside budgetmix: ``arize-phoenix`` pins ``anthropic<2`` (as of
20.26), which the ``anthropic`` extra's 2.x contradicts, so it lives in a virtualenv of
its own, made by ``bash scripts/install_phoenix.sh`` (``.venv-phoenix``, as a user runs
a backend beside their app). The server is found at ``$BUDGETMIX_PHOENIX`` (the
``phoenix`` executable) or ``.venv-phoenix/bin/phoenix``; without one the group is
skipped, except under ``CI``, where a missing backend fails it.

One server per test module: free 127.0.0.1 ports for HTTP and gRPC, an sqlite working
directory in a temporary folder, telemetry off, stopped when the module ends.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 180.0


def phoenix_executable() -> str | None:
    """The ``phoenix`` command to run, or None."""
    given = os.environ.get("BUDGETMIX_PHOENIX")
    if given:
        return given
    local = ROOT / ".venv-phoenix" / "bin" / "phoenix"
    if local.exists():
        return str(local)
    return shutil.which("phoenix")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Phoenix:
    """A running Phoenix: its base URL (OTLP/HTTP at ``/v1/traces``, REST at ``/v1``,
    GraphQL at ``/graphql``) and a client for its API."""

    def __init__(self, url: str, process: subprocess.Popen[bytes], log: Path) -> None:
        self.url = url
        self.process = process
        self.log = log
        self.api = httpx.Client(base_url=url, timeout=30.0, trust_env=False)

    def graphql(self, query: str, **variables: object) -> dict[str, object]:
        reply = self.api.post("/graphql", json={"query": query, "variables": variables})
        reply.raise_for_status()
        body = reply.json()
        assert not body.get("errors"), body["errors"]
        data: dict[str, object] = body["data"]
        return data


def start_phoenix(workdir: Path) -> Phoenix:
    """Start ``phoenix serve`` on free loopback ports and wait until it answers.

    Raises:
        RuntimeError: it exited, or did not answer within ``START_TIMEOUT_S``.
    """
    exe = phoenix_executable()
    assert exe is not None
    port, grpc = _free_port(), _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PHOENIX_"))}
    env.update(
        PHOENIX_HOST="127.0.0.1",
        PHOENIX_PORT=str(port),
        PHOENIX_GRPC_PORT=str(grpc),
        PHOENIX_WORKING_DIR=str(workdir),
        PHOENIX_TELEMETRY_ENABLED="false",
        NO_PROXY="127.0.0.1",
    )
    log = workdir / "phoenix.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [exe, "serve"], env=env, stdout=out, stderr=subprocess.STDOUT, cwd=workdir
        )
    phoenix = Phoenix(f"http://127.0.0.1:{port}", process, log)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"phoenix exited ({process.returncode}): {log.read_text()[-2000:]}")
        try:
            if phoenix.api.get("/healthz").status_code == 200:
                return phoenix
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    stop_phoenix(phoenix)
    tail = log.read_text()[-2000:]
    raise RuntimeError(f"phoenix did not answer in {START_TIMEOUT_S:.0f} s: {tail}")


def stop_phoenix(phoenix: Phoenix) -> None:
    """Stop the server (terminate, then kill after 20 s)."""
    phoenix.api.close()
    phoenix.process.terminate()
    try:
        phoenix.process.wait(20)
    except subprocess.TimeoutExpired:
        phoenix.process.kill()
        phoenix.process.wait(10)
