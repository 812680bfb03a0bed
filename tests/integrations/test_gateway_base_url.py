"""Frameworks budgeted through the gateway by ``base_url`` alone: no budgetmix import in
the framework's wiring, only the gateway's address (and the conversation header).

CrewAI is not here: crewai 1.15 needs openai<3, mcp<2 and older pydantic and rich than
budgetmix's extras install, and the set-up never downgrades a shared package."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from _integration_support import framework
from budgetmix import Budget
from budgetmix.adapters.testing import FakeLLMServer, Reply
from budgetmix.gateway import Gateway, GatewayConfig
from budgetmix.stores import MemoryStore

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no price map download
ANSWER = "[[ ## answer ## ]]\n3\n\n[[ ## completed ## ]]"  # DSPy's chat format


@pytest.fixture
def gateway_url(server: FakeLLMServer) -> Iterator[str]:
    uvicorn = framework("uvicorn")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = GatewayConfig(upstream=server.root_url, conversation=Budget(turns=2),
                           on_exhausted="error")
    app = Gateway(config, store=MemoryStore())
    serving = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                            log_level="error", lifespan="on"))
    thread = threading.Thread(target=lambda: asyncio.run(serving.serve()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not serving.started and time.monotonic() < deadline:
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    serving.should_exit = True
    thread.join(10)


def test_dspy_through_the_gateway_base_url(server: FakeLLMServer, gateway_url: str) -> None:
    dspy = framework("dspy")
    server.push(*[Reply.say(ANSWER) for _ in range(5)])
    lm = dspy.LM(
        "openai/gpt-4o",
        api_base=gateway_url + "/v1",  # the one line
        api_key="sk-dspy",
        extra_headers={"x-budgetmix-conversation": "dspy-run"},
        cache=False,
        num_retries=0,
    )
    predict = dspy.Predict("question -> answer")
    answers = []
    with pytest.raises(Exception, match="budget exhausted on turns"), dspy.context(lm=lm):
        for i in range(4):
            answers.append(predict(question=f"what is 1+2? ({i})").answer)
    assert answers == ["3", "3"]
    assert len(server.model_requests()) == 2  # the third never left the gateway
    notice = server.model_requests()[1].json["messages"][-1]["content"]
    assert notice == "Budget (v1): turn 2 of 2, the final turn."

