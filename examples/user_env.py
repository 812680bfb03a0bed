"""A user's own tool environment: reach a target number with `add`, then `submit`.

Tools are typed methods (their JSON schema comes from the hints and docstring, as for
`controller.tool`); a refused call is a labelled mistake, the next good step a recovery.
Train on it (`budgetmix train --env user_env:Counter ...`, see docs/training.md) and
deploy it under the controller with `env.controller_tools()`.
"""

from __future__ import annotations

from budgetmix.adapters.testing import tool_call, tool_calls
from budgetmix.training.envs import ToolEnv, ToolMistake, ToolResult, env_tool


class Counter(ToolEnv):
    name = "counter"

    def instructions(self) -> str:
        return "Make the counter equal the target: call add (1 to 3 at a time), then submit."

    def start(self, seed: int) -> str:
        self.target, self.value = 4 + seed % 3, 0
        return f"The target is {self.target}. The counter is 0."

    @env_tool
    def add(self, amount: int) -> ToolResult:
        """Add to the counter.

        Args:
            amount: how much to add, 1 to 3.
        """
        if not 1 <= amount <= 3:
            raise ToolMistake(f"amount must be 1 to 3, got {amount}")  # env_action_failed
        closer = abs(self.target - self.value - amount) < abs(self.target - self.value)
        self.value += amount
        return ToolResult(output=f"The counter is {self.value}.", progress=closer)

    @env_tool
    def submit(self) -> ToolResult:
        """Submit the counter (ends the task)."""
        ok = self.value == self.target
        return ToolResult(output="Correct." if ok else "Wrong.", done=True, success=ok)


def demonstration(env: Counter) -> list:
    """A scripted run for a reset `env`: one mistake (add 5), a recovery, then submit (its
    result ends the episode, in training and under the controller)."""
    steps = [tool_calls(tool_call("add", {"amount": 5}, id="call_0"))]
    left = env.target - env.value
    while left:
        n = min(3, left)
        steps.append(tool_calls(tool_call("add", {"amount": n}, id=f"call_{len(steps)}")))
        left -= n
    return [*steps, tool_calls(tool_call("submit", id=f"call_{len(steps)}"))]
