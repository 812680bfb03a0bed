"""CrewAI budgeted through the gateway by ``base_url`` alone. crewai 1.15 needs openai<3
and mcp<2, which budgetmix's extras do not allow, so it lives in a virtualenv of its own
(``scripts/install_crewai.sh``, ``.venv-crewai``) and the crew runs in a subprocess of it
(``_crewai_crew.py``): an unmodified Agent + Task + Crew, its ``LLM`` pointed at the
gateway, the gateway here in front of the fake upstream."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _integration_support import framework
from budgetmix import Budget
from budgetmix.adapters.testing import FakeLLMServer, Reply
from budgetmix.gateway import Gateway, GatewayConfig
from budgetmix.gateway.scopes import conversation_key, tenant_of
from budgetmix.stores import MemoryStore

HERE = Path(__file__).resolve().parent
CREWAI_PYTHON = HERE.parents[1] / ".venv-crewai" / "bin" / "python"
# CrewAI's telemetry, tracing and first-run prompts off: nothing leaves loopback
QUIET = {"CREWAI_DISABLE_TELEMETRY": "true", "OTEL_SDK_DISABLED": "true",
         "CREWAI_TRACING_ENABLED": "false", "CREWAI_DISABLE_TRACKING": "true",
         "CREWAI_STORAGE_DIR": "crewai", "PYTHONUNBUFFERED": "1"}

pytestmark = pytest.mark.skipif(
    not CREWAI_PYTHON.exists(),
    reason="no .venv-crewai (bash scripts/install_crewai.sh makes it): crewai cannot be "
    "installed beside budgetmix's extras (openai<3, mcp<2)",
)


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
def gateway_url(server: FakeLLMServer, store: MemoryStore) -> Iterator[str]:
    uvicorn = framework("uvicorn")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = GatewayConfig(upstream=server.root_url, conversation=Budget(turns=3))
    serving = uvicorn.Server(uvicorn.Config(Gateway(config, store=store),
                                            host="127.0.0.1", port=port,
                                            log_level="error", lifespan="on"))
    thread = threading.Thread(target=lambda: asyncio.run(serving.serve()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not serving.started and time.monotonic() < deadline:
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    serving.should_exit = True
    thread.join(10)


def test_a_crewai_crew_holds_the_turn_budget_through_base_url(
    server: FakeLLMServer, store: MemoryStore, gateway_url: str, tmp_path: Path
) -> None:
    # the fake model keeps calling the tool: only the budget ends the run
    server.push(*[Reply.call("lookup", {"query": f"peru {i}"}) for i in range(10)])
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), **QUIET}
    done = subprocess.run([str(CREWAI_PYTHON), str(HERE / "_crewai_crew.py"), gateway_url],
                          capture_output=True, text=True, timeout=240, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(server.model_requests()) == 3  # the fourth never left the gateway
    assert seen["calls"] == ["peru 0", "peru 1", "peru 2"]
    assert seen["refused"] == []
    # the crew's default_headers name the conversation; the header does not go upstream
    record = store.read(conversation_key(tenant_of({"authorization": "Bearer sk-crewai"}, None),
                                         "crew-run"))
    assert record is not None and record.used["turns"] == 3
    assert all("x-budgetmix-conversation" not in r.headers for r in server.model_requests())
    notice = server.model_requests()[2].json["messages"][-1]["content"]
    assert notice == "Budget (v1): turn 3 of 3, the final turn."
    # what CrewAI sees at exhaustion (on_exhausted = "respond", the default): the gateway's
    # final assistant message, taken by the crew as its answer
    assert seen.get("output") == "[budget: budget exhausted on turns: used 3 of 3]"
