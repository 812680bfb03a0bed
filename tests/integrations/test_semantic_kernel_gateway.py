"""Semantic Kernel budgeted through the gateway by ``base_url`` alone. semantic-kernel
does not install beside budgetmix's extras, so it lives in a virtualenv of its own
(``scripts/install_semantic_kernel.sh``, ``.venv-sk``) and the agent runs in a subprocess
of it (``_sk_agent.py``): an unmodified ``ChatCompletionAgent`` with a plugin, its
``OpenAIChatCompletion`` service given a plain ``AsyncOpenAI`` client whose ``base_url``
is the gateway's, the gateway here in front of the fake upstream."""

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

VENV = ".venv-sk"
WHY = missing(VENV, "scripts/install_semantic_kernel.sh")
pytestmark = pytest.mark.skipif(WHY is not None, reason=str(WHY))
TURNS = 3
EXHAUSTED = "[budget: budget exhausted on turns: used 3 of 3]"


def test_a_semantic_kernel_agent_holds_the_turn_budget_through_base_url(
    server: FakeLLMServer, spans: Spans, tmp_path: Path
) -> None:
    # the fake model keeps calling the tool: only the budget ends the run
    server.push(*[Reply.call("lookup", {"query": f"peru {i}"}) for i in range(10)])
    store = MemoryStore()
    config = GatewayConfig(upstream=server.root_url, conversation=Budget(turns=TURNS),
                           on_exhausted="error")  # fmt: skip
    with serving(config, store, spans) as url:
        seen = run_script(VENV, "_sk_agent.py", url, tmp_path)
    assert seen["refused"] == []
    assert len(server.model_requests()) == 3  # the fourth never left the gateway
    assert seen["calls"] == ["peru 0", "peru 1", "peru 2"]
    # the ledger charged what the upstream received, under the conversation the header names
    tenant = tenant_of({"authorization": "Bearer sk-semantic-kernel"}, None)
    record = store.read(conversation_key(tenant, "sk-run"))
    assert record is not None and record.used["turns"] == len(server.model_requests())
    assert all("x-budgetmix-conversation" not in r.headers for r in server.model_requests())
    notice = server.model_requests()[2].json["messages"][-1]["content"]
    assert notice == "Budget (v1): turn 3 of 3, the final turn."
    # one request was refused (the SDK did not retry the 429: x-should-retry: false), and
    # its episode closed on the budget
    assert episode_statuses(spans) == [("success", None)] * 3 + [("budget_exhausted", "turns")]
    # what Semantic Kernel's caller sees (on_exhausted = "error"): get_response raises
    # ServiceResponseException, caused by the OpenAI SDK's RateLimitError for the 429
    assert "output" not in seen, seen
    error, cause = seen["error"][:2]
    assert error.startswith(
        "semantic_kernel.exceptions.service_exceptions.ServiceResponseException"
    )
    assert cause == f"openai.RateLimitError: Error code: 429 - {EXHAUSTED}"
