"""Google ADK budgeted through the gateway by ``base_url`` alone. google-adk 2.13 holds
OpenTelemetry below budgetmix's extras, so it lives in a virtualenv of its own
(``scripts/install_adk.sh``, ``.venv-adk``) and the agent runs in a subprocess of it
(``_adk_agent.py``): an unmodified ``LlmAgent`` with a tool, its ``LiteLlm`` model pointed
at the gateway, the gateway here in front of the fake upstream."""

from __future__ import annotations

from pathlib import Path

import pytest
from _gateway_serving import episode_statuses, missing, run_script, serving
from _integration_support import Spans
from budgetmix import Budget
from budgetmix.adapters.testing import FakeLLMServer, Reply
from budgetmix.gateway import GatewayConfig
from budgetmix.gateway.scopes import conversation_key, tenant_of
from budgetmix.stores import MemoryStore

VENV = ".venv-adk"
WHY = missing(VENV, "scripts/install_adk.sh")
pytestmark = pytest.mark.skipif(WHY is not None, reason=str(WHY))
TURNS = 3


def test_an_adk_agent_holds_the_turn_budget_through_base_url(
    server: FakeLLMServer, spans: Spans, tmp_path: Path
) -> None:
    # the fake model keeps calling the tool: only the budget ends the run
    server.push(*[Reply.call("lookup", {"query": f"peru {i}"}) for i in range(10)])
    store = MemoryStore()
    config = GatewayConfig(upstream=server.root_url, conversation=Budget(turns=TURNS))
    with serving(config, store, spans) as url:
        seen = run_script(VENV, "_adk_agent.py", url, tmp_path)
    assert seen["refused"] == []
    assert len(server.model_requests()) == 3  # the fourth never left the gateway
    assert seen["calls"] == ["peru 0", "peru 1", "peru 2"]
    # the ledger charged what the upstream received, under the conversation the header names
    record = store.read(conversation_key(tenant_of({"authorization": "Bearer sk-adk"}, None),
                                         "adk-run"))  # fmt: skip
    assert record is not None and record.used["turns"] == len(server.model_requests())
    assert all("x-budgetmix-conversation" not in r.headers for r in server.model_requests())
    notice = server.model_requests()[2].json["messages"][-1]["content"]
    assert notice == "Budget (v1): turn 3 of 3, the final turn."
    # one request was refused, and its episode closed on the budget
    assert episode_statuses(spans) == [("success", None)] * 3 + [("budget_exhausted", "turns")]
    # what ADK's caller sees (on_exhausted = "respond", the default): the gateway's final
    # assistant message, the agent's final response
    assert seen.get("output") == "[budget: budget exhausted on turns: used 3 of 3]", seen
