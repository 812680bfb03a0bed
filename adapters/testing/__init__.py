"""Test doubles shipped in the package: scripted models, a fake LLM server, a network guard.

Tests, examples and benchmarks use these so that nothing can reach a real model:

* :class:`ScriptedModel` plays a script as a chat model and records every request;
  :class:`FailingModel` injects transient failures; :class:`MistakeThenRecover` is a
  seeded scripted agent (:mod:`budgetmix.adapters.testing.scripted`);
* :class:`FakeLLMServer` answers OpenAI Chat Completions, OpenAI Responses and
  Anthropic Messages requests from a script of :class:`Reply` s, on a loopback port
  or in-process (:meth:`FakeLLMServer.transport`)
  (:mod:`budgetmix.adapters.testing.fake_server`);
* :func:`block_network` refuses every connection that would leave the machine
  (:mod:`budgetmix.adapters.testing.network`).
"""

from budgetmix.adapters.testing.fake_server import (
    FakeLLMServer,
    FakeTransport,
    RecordedRequest,
    Reply,
)
from budgetmix.adapters.testing.network import NetworkBlockedError, block_network
from budgetmix.adapters.testing.scripted import (
    FailingModel,
    MistakeThenRecover,
    Responder,
    ScriptedModel,
    ScriptExhaustedError,
    TransientModelError,
    final_answer,
    invalid_json_call,
    tool_call,
    tool_calls,
    unknown_tool_call,
)

__all__ = [
    "FailingModel",
    "FakeLLMServer",
    "FakeTransport",
    "MistakeThenRecover",
    "NetworkBlockedError",
    "RecordedRequest",
    "Reply",
    "Responder",
    "ScriptExhaustedError",
    "ScriptedModel",
    "TransientModelError",
    "block_network",
    "final_answer",
    "invalid_json_call",
    "tool_call",
    "tool_calls",
    "unknown_tool_call",
]
