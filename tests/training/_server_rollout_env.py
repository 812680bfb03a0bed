"""A tool environment for server-rollout tests: pick numbers until an even one, then say so.

Episodes take 1 to several turns (a sampled odd pick asks for another), so rewards vary
and consecutive turns' ids are stitched. The demonstrator picks at random, then answers.
"""

from __future__ import annotations

import random
from typing import Any

from budgetmix.training.envs.tool_env import ToolEnv, ToolResult, env_tool


def _call(n: int) -> dict[str, Any]:
    call = {"id": "x", "type": "function", "function": {"name": "pick", "arguments": {"n": n}}}
    return {"role": "assistant", "content": "", "tool_calls": [call]}


def _demonstrator(kwargs: Any, error_rate: float, seed: int) -> Any:
    rng = random.Random(seed)

    def act(req: Any) -> Any:
        last = req.messages[-1]
        if last["role"] == "tool" and " is even." in last["content"]:
            return {"role": "assistant", "content": "Done."}
        return _call(rng.randrange(10))

    return act


class PickEnv(ToolEnv):
    """Pick until even; the episode ends with a reply (a success after an even pick)."""

    name = "pick"
    demonstrator = staticmethod(_demonstrator)

    def instructions(self) -> str:
        return "Call pick with a number from 0 to 9 until it is even, then reply Done."

    def start(self, seed: int) -> str:
        self.even = False
        return "Pick an even number."

    @env_tool
    def pick(self, n: int) -> ToolResult:
        """Pick a number.

        Args:
            n: the number, 0 to 9.
        """
        self.even = n % 2 == 0
        return ToolResult(output=f"{n} is {'even' if self.even else 'odd'}.", progress=self.even)

    def reply(self, text: str) -> ToolResult:
        return ToolResult(output="ok", done=True, success=self.even)
