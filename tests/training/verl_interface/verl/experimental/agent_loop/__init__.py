"""verl 0.9.1 ``verl.experimental.agent_loop`` (pinned copy, part)."""

from .agent_loop import AgentLoopBase, AgentLoopOutput

__all__ = ["AgentLoopBase", "AgentLoopOutput"]
