"""Adapters: chat models for every provider, plain-function tools and the built-in agent loop.

Importing this package stays light: provider SDKs, torch and transformers are
imported only when an adapter that needs them is used. Provider adapters
(``OpenAIChatModel``, ``AnthropicChatModel``, the HTTP transport, pricing) are
loaded on first attribute access.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from budgetmix.adapters.base import (
    AsyncChatModel,
    ChatMessage,
    ChatModel,
    ModelResponse,
    ToolCallRequest,
    ToolSpec,
    Usage,
)
from budgetmix.adapters.local import LocalChatModel, parse_tool_calls
from budgetmix.adapters.loop import AgentRun, arun_agent, run_agent
from budgetmix.adapters.scripted import (
    FailingModel,
    MistakeThenRecover,
    ModelRequest,
    NetworkBlockedError,
    ScriptedModel,
    ScriptExhaustedError,
    TransientModelError,
    block_network,
    final_answer,
    invalid_json_call,
    tool_call,
    tool_calls,
    unknown_tool_call,
)
from budgetmix.adapters.tools import Tool, Toolbox, tool

__all__ = [
    "AgentRun",
    "AsyncChatModel",
    "ChatMessage",
    "ChatModel",
    "FailingModel",
    "LocalChatModel",
    "MistakeThenRecover",
    "ModelRequest",
    "ModelResponse",
    "NetworkBlockedError",
    "ScriptExhaustedError",
    "ScriptedModel",
    "Tool",
    "ToolCallRequest",
    "ToolSpec",
    "Toolbox",
    "TransientModelError",
    "Usage",
    "arun_agent",
    "block_network",
    "final_answer",
    "invalid_json_call",
    "parse_tool_calls",
    "run_agent",
    "tool",
    "tool_call",
    "tool_calls",
    "unknown_tool_call",
]

#: Public names of modules other adapters provide, loaded on first access.
_LAZY: dict[str, str] = {
    "AnthropicChatModel": "anthropic",
    "DEFAULT_PRICING": "pricing",
    "ModelPrice": "pricing",
    "OpenAIChatModel": "openai",
    "Pricing": "pricing",
}


def _available(module: str) -> bool:
    # find_spec locates the file without executing it (no SDK import).
    return importlib.util.find_spec(f"{__name__}.{module}") is not None


# Provider modules land independently; list only those present so `import *` works.
__all__ += [name for name, module in _LAZY.items() if _available(module)]
__all__.sort()


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
