"""What the tests of frameworks kept in virtualenvs of their own share (Google ADK,
Semantic Kernel): the gateway served on a loopback port in front of the fake upstream,
its episodes' spans, and one run of a framework script in its virtualenv's Python."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from _integration_support import Spans, framework
from budgetmix.gateway import Gateway, GatewayConfig
from budgetmix.stores import MemoryStore

ROOT = Path(__file__).resolve().parents[2]
#: Telemetry and first-run prompts off in the framework's process: nothing leaves loopback
QUIET = {"OTEL_SDK_DISABLED": "true", "PYTHONUNBUFFERED": "1",
         "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False",
         "SEMANTICKERNEL_TELEMETRY_DISABLED": "true",
         "AZURE_TELEMETRY_DISABLED": "true", "ADK_DISABLE_TELEMETRY": "true"}  # fmt: skip
#: Where an install script writes why it failed (read by :func:`missing`)
FAILED = "budgetmix-install-failed.txt"


def missing(venv: str, script: str) -> str | None:
    """Why the tests of the framework in ``venv`` cannot run (``None``: they can): the
    reason its install script left, or that the virtualenv is absent."""
    python = ROOT / venv / "bin" / "python"
    failed = ROOT / venv / FAILED
    if failed.exists():
        return f"{failed.read_text().strip()} (bash {script} retries)"
    if not python.exists():
        return f"no {venv}: bash {script} makes it"
    return None


@contextmanager
def serving(config: GatewayConfig, store: MemoryStore, spans: Spans) -> Iterator[str]:
    """The gateway on a free loopback port, its spans in ``spans``: its base URL."""
    uvicorn = framework("uvicorn")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = Gateway(config, store=store, tracer_provider=spans.provider)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="error", lifespan="on"))  # fmt: skip
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def run_script(venv: str, script: str, url: str, cwd: Path,
               env: Mapping[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    """Run ``tests/integrations/<script>`` with ``venv``'s Python against the gateway at
    ``url``: the JSON object its last output line is."""
    full = {"PATH": os.environ.get("PATH", ""), "HOME": str(cwd), **QUIET, **(env or {})}
    done = subprocess.run(
        [str(ROOT / venv / "bin" / "python"), str(Path(__file__).parent / script), url],
        capture_output=True, text=True, timeout=240, cwd=cwd, env=full,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert lines, done.stderr[-3000:]
    out: dict[str, Any] = json.loads(lines[-1])
    return out


def episode_statuses(spans: Spans) -> list[tuple[str, object]]:
    """Each gateway episode's (status, stop reason), in the order they ended."""
    out: list[tuple[str, object]] = []
    for span in sorted(
        spans.named("invoke_agent budgetmix-gateway"), key=lambda s: s.end_time or 0
    ):
        attributes = span.attributes or {}
        out.append(
            (str(attributes.get("budgetmix.status")), attributes.get("budgetmix.stop_reason"))
        )
    return out
