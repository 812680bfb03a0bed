"""An unmodified CrewAI crew whose LLM reaches the model through ``base_url`` alone; run
with ``.venv-crewai/bin/python`` by test_crewai_gateway.py (CrewAI cannot be installed
beside budgetmix's extras). Argument: the gateway's URL. Prints one JSON line: the
tool's calls, the crew's final output or the exception it raised, and every non-loopback
address CrewAI tried to reach (each one refused)."""

from __future__ import annotations

import json
import sys
from typing import Any

from _loopback import REFUSED  # first: the guard is on before any framework import
from crewai import LLM, Agent, Crew, Task
from crewai.tools import tool

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
