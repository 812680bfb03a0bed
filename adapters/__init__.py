"""Adapters: chat models for every provider, plain-function tools and the built-in agent loop.

Importing this package stays light: provider SDKs, torch and transformers are
imported only when an adapter that needs them is used. Provider adapters
(``budgeted``, ``OpenAIChatModel``, ``AnthropicChatModel``, the HTTP transport,
pricing) are loaded on first attribute access. The test doubles live in
:mod:`budgetmix.adapters.testing` (the scripted models and the network guard are
exported here too).
"""

import importlib
import typing

from budgetmix.adapters.base import (
    AsyncChatModel,
    ChatMessage,
    ChatModel,
    ChatModelBase,
    ModelRequest,
    ModelResponse,
    ToolCallRequest,
    ToolSpec,
    Usage,
)
from budgetmix.adapters.chat_template import ChatTemplate
from budgetmix.adapters.env_agent import ChatModelEnvAgent
from budgetmix.adapters.local import LocalChatModel, parse_tool_calls
from budgetmix.adapters.loop import AgentRun, EndEpisode, arun_agent, run_agent
from budgetmix.adapters.testing.network import NetworkBlockedError, block_network
from budgetmix.adapters.testing.scripted import (
    FailingModel,
    MistakeThenRecover,
    ScriptedModel,
    ScriptExhaustedError,
    TransientModelError,
    final_answer,
    invalid_json_call,
    tool_call,
    tool_calls,
    unknown_tool_call,
)
from budgetmix.adapters.tools import Tool, Toolbox, tool

__all__ = [
    "DEFAULT_PRICING",
    "AgentRun",
    "AnthropicChatModel",
    "AsyncBudgetTransport",
    "AsyncChatModel",
    "BudgetTransport",
    "ChatMessage",
    "ChatModel",
    "ChatModelBase",
    "ChatModelEnvAgent",
    "ChatTemplate",
    "EndEpisode",
    "FailingModel",
    "LocalChatModel",
    "MistakeThenRecover",
    "ModelPrice",
    "ModelRequest",
    "ModelResponse",
    "NetworkBlockedError",
    "OpenAIChatModel",
    "Pricing",
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
    "budgeted",
    "budgeted_session",
    "final_answer",
    "invalid_json_call",
    "parse_tool_calls",
    "run_agent",
    "tool",
    "tool_call",
    "tool_calls",
    "unknown_tool_call",
]

#: Public names of the provider modules, imported on first access.
_LAZY: dict[str, str] = {
    "DEFAULT_PRICING": "pricing",
    "AnthropicChatModel": "anthropic",
    "AsyncBudgetTransport": "http",
    "BudgetTransport": "http",
    "ModelPrice": "pricing",
    "budgeted": "clients",
    "budgeted_session": "mcp",
    "OpenAIChatModel": "openai",
    "Pricing": "pricing",
}

if typing.TYPE_CHECKING:
    from budgetmix.adapters.anthropic import AnthropicChatModel
    from budgetmix.adapters.clients import budgeted
    from budgetmix.adapters.http import AsyncBudgetTransport, BudgetTransport
    from budgetmix.adapters.mcp import budgeted_session
    from budgetmix.adapters.openai import OpenAIChatModel
    from budgetmix.adapters.pricing import DEFAULT_PRICING, ModelPrice, Pricing


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
