"""An unmodified CrewAI crew whose LLM reaches the model through ``base_url`` alone; run
with ``.venv-crewai/bin/python`` by test_crewai_gateway.py (CrewAI cannot be installed
beside budgetmix's extras). Argument: the gateway's URL. Prints one JSON line: the
tool's calls, the crew's final output or the exception it raised, and every non-loopback
address CrewAI tried to reach (each one refused)."""

from __future__ import annotations

import json
import socket
import sys
from typing import Any

REFUSED: list[str] = []
_connect = socket.socket.connect


def _loopback_only(self: socket.socket, address: Any) -> None:
    host = address[0] if isinstance(address, tuple) else str(address)
    if self.family in (socket.AF_INET, socket.AF_INET6) and host not in ("127.0.0.1", "::1"):
        REFUSED.append(str(host))
        raise OSError(f"network blocked: {host}")
    _connect(self, address)


socket.socket.connect = _loopback_only  # type: ignore[method-assign]

from crewai import LLM, Agent, Crew, Task  # noqa: E402
from crewai.tools import tool  # noqa: E402

CALLS: list[str] = []


@tool("lookup")
def lookup(query: str) -> str:
    """Look a fact up."""
    CALLS.append(query)
    return f"no result for {query}"


def main(url: str) -> None:
    llm = LLM(
        model="openai/gpt-4o",
        base_url=url + "/v1",  # the one line
        api_key="sk-crewai",
        default_headers={"x-budgetmix-conversation": "crew-run"},
        max_retries=0,
    )
    agent = Agent(role="researcher", goal="answer the question", backstory="careful",
                  tools=[lookup], llm=llm, max_iter=10, verbose=False)
    task = Task(description="What is the capital of Peru?", expected_output="a city",
                agent=agent)
    out: dict[str, Any] = {}
    try:
        out["output"] = Crew(agents=[agent], tasks=[task], verbose=False).kickoff().raw
    except Exception as exc:  # what the crew's caller sees
        out["error"] = f"{type(exc).__name__}: {exc}"
    out.update(calls=CALLS, refused=REFUSED)
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
