"""Any language: the official Node `openai` package, budgeted through base_url alone."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from _gateway import GatewayThread
from budgetmix import Budget
from budgetmix.adapters.testing import FakeLLMServer
from budgetmix.gateway import GatewayConfig
from budgetmix.stores import MemoryStore

NODE_DIR = Path(__file__).parent / "node"


def test_the_node_openai_client_is_budgeted() -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node is not installed (/usr/bin/node)")
    if not (NODE_DIR / "node_modules" / "openai").is_dir():
        pytest.skip("the npm openai package is not installed in tests/gateway/node "
                    "(scripts/bootstrap.sh runs npm install there)")
    with FakeLLMServer() as fake:
        config = GatewayConfig(upstream=fake.root_url, conversation=Budget(turns=2))
        with GatewayThread(config, store=MemoryStore()) as gw:
            proc = subprocess.run([node, str(NODE_DIR / "client.mjs"), gw.url],
                                  capture_output=True, text=True, timeout=60, check=False)
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)
        assert out["whole"] == ["done", "done"]
        # the third turn, streamed, is answered by the gateway as the wire's own stream
        assert "budget exhausted on turns: used 2 of 2" in out["streamed"]
        assert len(fake.model_requests()) == 2
        notice = fake.model_requests()[1].json["messages"][-1]["content"]
        assert notice == "Budget (v1): turn 2 of 2, the final turn."
