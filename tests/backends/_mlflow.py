"""A real MLflow tracking server (3.x) on loopback for the backend group (``-m backends``).

MLflow is not installed beside budgetmix: its server brings scikit-learn, scipy, pyarrow
and Flask, none of which budgetmix needs, so it lives in a virtualenv of its own, made by
``bash scripts/install_mlflow.sh`` (``.venv-mlflow``). The server is found at
``$BUDGETMIX_MLFLOW`` (the ``mlflow`` executable) or ``.venv-mlflow/bin/mlflow``; without
one the MLflow tests are skipped, except under ``CI``, where a missing backend fails them.

The server takes OTLP/HTTP at ``/v1/traces`` (the ``x-mlflow-experiment-id`` header names
the experiment); what it stored is read back with MLflow's own client
(``MlflowClient.search_traces``), run in the server's virtualenv.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 180.0

# run by the server's python: every trace of an experiment, its spans as JSON
_QUERY = """
import json, sys
from mlflow import MlflowClient
client = MlflowClient(sys.argv[1])
out = []
for trace in client.search_traces(locations=[sys.argv[2]], max_results=500):
    spans = []
    for s in trace.data.spans:
        spans.append({
            "name": s.name, "span_id": s.span_id, "parent_id": s.parent_id,
            "attributes": s.attributes,
            "status": {"code": str(s.status.status_code), "description": s.status.description},
            "events": [{"name": e.name, "attributes": e.attributes} for e in s.events],
        })
    info = trace.info
    out.append({"trace_id": info.trace_id, "state": str(info.state), "spans": spans,
                "token_usage": info.token_usage})
print(json.dumps(out, default=str))
"""


def mlflow_executable() -> str | None:
    """The ``mlflow`` command to run, or None."""
    given = os.environ.get("BUDGETMIX_MLFLOW")
    if given:
        return given
    local = ROOT / ".venv-mlflow" / "bin" / "mlflow"
    if local.exists():
        return str(local)
    return shutil.which("mlflow")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MLflow:
    """A running MLflow server: its URL, a client of its REST API, and its python."""

    def __init__(self, url: str, process: subprocess.Popen[bytes], log: Path, exe: str) -> None:
        self.url = url
        self.process = process
        self.log = log
        self.python = str(Path(exe).with_name("python"))
        self.api = httpx.Client(base_url=url, timeout=30.0, trust_env=False)

    def experiment(self, name: str) -> str:
        """A new experiment's id."""
        reply = self.api.post("/api/2.0/mlflow/experiments/create", json={"name": name})
        reply.raise_for_status()
        return str(reply.json()["experiment_id"])

    def traces(self, experiment_id: str, expected: int, timeout_s: float = 60.0) -> list[Any]:
        """The experiment's traces (each with its spans), once ``expected`` are stored."""
        deadline = time.monotonic() + timeout_s
        while True:
            proc = subprocess.run(
                [self.python, "-c", _QUERY, self.url, experiment_id],
                capture_output=True,
                text=True,
                timeout=120,
                env={**os.environ, "MLFLOW_TRACKING_URI": self.url},
            )
            assert proc.returncode == 0, proc.stderr[-3000:]
            found: list[Any] = json.loads(proc.stdout.strip().splitlines()[-1])
            if len(found) >= expected or time.monotonic() > deadline:
                return found
            time.sleep(1.0)


def start_mlflow(workdir: Path) -> MLflow:
    """Start ``mlflow server`` on a free loopback port (sqlite store) and wait for it.

    Raises:
        RuntimeError: it exited, or did not answer within ``START_TIMEOUT_S``.
    """
    exe = mlflow_executable()
    assert exe is not None
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "MLFLOW_"))}
    log = workdir / "mlflow.log"
    cmd = [exe, "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    cmd += ["--backend-store-uri", f"sqlite:///{workdir / 'mlflow.db'}"]
    cmd += ["--default-artifact-root", str(workdir / "artifacts")]
    with open(log, "wb") as out:
        process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"mlflow exited ({process.returncode}): {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=2.0, trust_env=False).status_code == 200:
                return MLflow(url, process, log, exe)
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    process.kill()
    raise RuntimeError(f"mlflow did not start within {START_TIMEOUT_S:.0f} s")


def stop_mlflow(server: MLflow) -> None:
    """Stop the server and its workers."""
    server.api.close()
    server.process.terminate()
    try:
        server.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.process.kill()
