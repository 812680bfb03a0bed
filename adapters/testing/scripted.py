"""Scripted chat models: a model that plays a script, fault injection, a scripted agent.

:class:`ScriptedModel` is a :class:`~budgetmix.adapters.base.ChatModel` and an
:class:`~budgetmix.adapters.base.AsyncChatModel` that plays a list of
:class:`ModelResponse` (or asks a responder function) and records every
request it saw, notice and ``tool_choice`` included, so a test can assert
exactly what the model was shown. :class:`FailingModel` raises transient
errors a set number of times before delegating (retry tests).
:class:`MistakeThenRecover` is a seeded scripted agent that makes mistakes
at a given rate and then recovers (the demo's stand-in for a model).
"""

from __future__ import annotations

import inspect
import itertools
import json
import random
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from budgetmix.adapters.base import (
    AsyncChatModel,
    ChatMessage,
    ChatModel,
    ChatModelBase,
    ModelRequest,
    ModelResponse,
    ToolCallRequest,
    ToolChoice,
    ToolSpec,
    Usage,
)
from budgetmix.exceptions import BudgetmixError, ConfigError

__all__ = [
    "FailingModel",
    "MistakeThenRecover",
    "Responder",
    "ScriptExhaustedError",
    "ScriptedModel",
    "TransientModelError",
    "final_answer",
    "invalid_json_call",
    "tool_call",
    "tool_calls",
    "unknown_tool_call",
]


#: ``(messages, tools, notice) -> ModelResponse``; a responder that also takes a
#: ``tool_choice`` keyword parameter receives it.
Responder = Callable[..., ModelResponse]

_call_ids = itertools.count(1)


class ScriptExhaustedError(BudgetmixError, AssertionError):
    """A :class:`ScriptedModel` was called more often than its script has responses."""


# -- script helpers ---------------------------------------------------------------------
def tool_call(
    name: str, arguments: Mapping[str, Any] | str | None = None, *, id: str | None = None
) -> ToolCallRequest:
    """A tool call; a mapping is JSON-encoded, a string is sent verbatim."""
    raw = arguments if isinstance(arguments, str) else json.dumps(dict(arguments or {}))
    return ToolCallRequest(id=id or f"call_{next(_call_ids)}", name=name, arguments=raw)


def tool_calls(
    *calls: ToolCallRequest, text: str = "", usage: Usage | None = None
) -> ModelResponse:
    """A response asking for ``calls`` (a parallel batch when more than one)."""
    return ModelResponse(text=text, tool_calls=calls, finish_reason="tool_calls", usage=usage)


def final_answer(text: str, *, usage: Usage | None = None) -> ModelResponse:
    """A response without tool calls: the loop's final answer."""
    return ModelResponse(text=text, finish_reason="stop", usage=usage)


def invalid_json_call(name: str, raw: str = '{"x": ', *, id: str | None = None) -> ToolCallRequest:
    """A call whose arguments are truncated JSON (an ``invalid_tool_arguments`` mistake)."""
    return tool_call(name, raw, id=id)


def unknown_tool_call(
    name: str = "no_such_tool", arguments: Mapping[str, Any] | None = None
) -> ToolCallRequest:
    """A call of a tool the agent does not have (an ``unknown_tool`` mistake)."""
    return tool_call(name, arguments)


def _estimate_usage(messages: Sequence[ChatMessage], notice: str | None, text: str) -> Usage:
    # Deterministic stand-in for a tokenizer: about four characters per token.
    chars = sum(len(m.content) + sum(len(c.arguments) for c in m.tool_calls) for m in messages)
    chars += len(notice or "")
    return Usage(input_tokens=chars // 4 + 1, output_tokens=len(text) // 4 + 1)


class ScriptedModel(ChatModelBase[ModelRequest, ModelResponse]):
    """A chat model that plays a script; both :class:`ChatModel` and :class:`AsyncChatModel`.

    Args:
        script: responses returned in order, or a responder function called for
            every request (see :data:`Responder`).
        model_name: reported as the model (``gen_ai.request.model``).
        estimate_usage: fill in a deterministic token estimate where a
            response carries no usage.

    Raises:
        ScriptExhaustedError: (from ``complete``) more calls than scripted responses.
    """

    provider_name: str = "scripted"

    def __init__(
        self,
        script: Sequence[ModelResponse] | Responder,
        *,
        model_name: str = "scripted-model",
        estimate_usage: bool = True,
    ) -> None:
        self.model_name = model_name
        self.estimate_usage = estimate_usage
        self.requests: list[ModelRequest] = []
        self._lock = threading.Lock()
        self._responder: Responder | None = None
        self._script: tuple[ModelResponse, ...] = ()
        self._passes_tool_choice = False
        if callable(script):
            self._responder = script
            self._passes_tool_choice = _accepts_keyword(script, "tool_choice")
        else:
            self._script = tuple(script)
            for r in self._script:
                if not isinstance(r, ModelResponse):
                    raise ConfigError(f"script entries must be ModelResponse, got {r!r}")

    @property
    def calls(self) -> int:
        """How many requests the model received."""
        return len(self.requests)

    @property
    def notices(self) -> list[str | None]:
        """The notice of every request, in order."""
        return [r.notice for r in self.requests]

    def build_request(self, call: ModelRequest) -> ModelRequest:
        """The request, as :attr:`requests` records it."""
        return call

    def send(self, request: ModelRequest) -> ModelResponse:
        """Record ``request`` and answer with the next scripted response."""
        with self._lock:
            index = len(self.requests)
            self.requests.append(request)
        if self._responder is not None:
            extra = {"tool_choice": request.tool_choice} if self._passes_tool_choice else {}
            return self._responder(request.messages, request.tools, request.notice, **extra)
        if index < len(self._script):
            return self._script[index]
        raise ScriptExhaustedError(
            f"{self.model_name}: call {index + 1} but the script has {len(self._script)}"
        )

    async def asend(self, request: ModelRequest) -> ModelResponse:
        """:meth:`send`, on the event loop (a script does not block)."""
        return self.send(request)

    def read_reply(self, response: ModelResponse, request: ModelRequest) -> ModelResponse:
        """``response`` with the model name and, with ``estimate_usage``, a usage estimate."""
        usage = response.usage
        if usage is None and self.estimate_usage:
            usage = _estimate_usage(request.messages, request.notice, response.text)
        return ModelResponse(
            text=response.text,
            tool_calls=response.tool_calls,
            finish_reason=response.finish_reason,
            usage=usage,
            model=response.model or self.model_name,
            raw=response.raw,
        )


def _accepts_keyword(fn: Callable[..., Any], name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


# -- fault injection --------------------------------------------------------------------
class TransientModelError(Exception):
    """A provider error the retry policy classifies as transient (HTTP 503 by default)."""

    def __init__(self, message: str = "service unavailable", *, status_code: int = 503) -> None:
        super().__init__(message)
        self.status_code = status_code


class FailingModel(ChatModelBase[ModelRequest, ModelResponse]):
    """Wraps a model and raises an error on its first ``failures`` calls.

    ``error`` builds the exception for each failing attempt (default: a
    transient :class:`TransientModelError`); a failing attempt never reaches
    the wrapped model. ``attempts`` counts every call.
    """

    def __init__(
        self,
        inner: ChatModel | AsyncChatModel,
        *,
        failures: int = 1,
        error: Callable[[], BaseException] = TransientModelError,
    ) -> None:
        if failures < 0:
            raise ConfigError(f"failures must be >= 0, got {failures!r}")
        self.inner = inner
        self.failures = failures
        self.error = error
        self.attempts = 0
        self.model_name = inner.model_name
        self.provider_name = inner.provider_name
        self._lock = threading.Lock()

    def _maybe_fail(self) -> None:
        with self._lock:
            self.attempts += 1
            failing = self.attempts <= self.failures
        if failing:
            raise self.error()

    def build_request(self, call: ModelRequest) -> ModelRequest:
        """The request to hand on."""
        return call

    def send(self, request: ModelRequest) -> ModelResponse:
        """Fail, or ask the wrapped model's ``complete``."""
        self._maybe_fail()
        if not isinstance(self.inner, ChatModel):
            raise ConfigError(f"{type(self.inner).__name__} has no sync complete()")
        r = request
        return self.inner.complete(r.messages, r.tools, notice=r.notice, tool_choice=r.tool_choice)

    async def asend(self, request: ModelRequest) -> ModelResponse:
        """Fail, or ask the wrapped model's ``acomplete`` (``complete`` when it has none)."""
        self._maybe_fail()
        r = request
        if isinstance(self.inner, AsyncChatModel):
            return await self.inner.acomplete(
                r.messages, r.tools, notice=r.notice, tool_choice=r.tool_choice
            )
        return self.inner.complete(r.messages, r.tools, notice=r.notice, tool_choice=r.tool_choice)

    def read_reply(self, response: ModelResponse, request: ModelRequest) -> ModelResponse:
        """The wrapped model's response, as it came."""
        return response


# -- a scripted agent policy ------------------------------------------------------------
MistakeStyle = Literal["invalid_json", "unknown_tool", "bad_arguments"]


class MistakeThenRecover:
    """A seeded scripted agent: follows a plan of tool calls, slipping up now and then.

    On each turn it makes the next planned call that has not yet succeeded
    (it reads progress from the conversation, so retries and re-asks are
    harmless). With probability ``mistake_rate`` (drawn from ``seed`` and the
    turn's position, so runs are reproducible) it makes a mistake instead,
    of a style drawn from ``styles``; the turn after a mistake is always
    correct, so every mistake is followed by a recovery. When the plan is
    done, or on a turn with ``tool_choice="none"`` (the grace turn), it
    answers ``answer`` (a best-effort answer carries the ``partial_prefix``).

    Use as the script of a :class:`ScriptedModel`.

    Raises:
        ConfigError: ``mistake_rate`` outside [0, 1] or an unknown style.
    """

    def __init__(
        self,
        plan: Sequence[tuple[str, Mapping[str, Any]]],
        answer: str,
        *,
        mistake_rate: float = 0.3,
        seed: int = 0,
        styles: Sequence[MistakeStyle] = ("invalid_json", "unknown_tool", "bad_arguments"),
        partial_prefix: str = "Best effort: ",
    ) -> None:
        if not 0.0 <= mistake_rate <= 1.0:
            raise ConfigError(f"mistake_rate must lie in [0, 1], got {mistake_rate!r}")
        for style in styles:
            if style not in ("invalid_json", "unknown_tool", "bad_arguments"):
                raise ConfigError(f"unknown mistake style {style!r}")
        if not styles:
            raise ConfigError("styles must not be empty")
        self.plan = tuple((name, dict(args)) for name, args in plan)
        self.answer = answer
        self.mistake_rate = mistake_rate
        self.seed = seed
        self.styles = tuple(styles)
        self.partial_prefix = partial_prefix

    def __call__(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
        notice: str | None,
        *,
        tool_choice: ToolChoice = "auto",
    ) -> ModelResponse:
        """The next scripted reply to ``messages``, in the configured style."""
        done = sum(1 for m in messages if m.role == "tool" and not m.is_error)
        if tool_choice == "none" or done >= len(self.plan):
            prefix = "" if done >= len(self.plan) else self.partial_prefix
            return final_answer(f"{prefix}{self.answer}")
        position = sum(1 for m in messages if m.role == "assistant")
        name, args = self.plan[done]
        call_id = f"call_{position + 1}"
        last_failed = bool(messages) and messages[-1].role == "tool" and messages[-1].is_error
        rng = random.Random(f"{self.seed}:{position}")
        if not last_failed and rng.random() < self.mistake_rate:
            style = rng.choice(self.styles)
            if style == "invalid_json":
                bad = invalid_json_call(name, json.dumps(args)[:-1], id=call_id)
            elif style == "unknown_tool":
                bad = tool_call(f"{name}_v2", args, id=call_id)
            else:
                bad = tool_call(name, {"unexpected_argument": True}, id=call_id)
            return tool_calls(bad)
        return tool_calls(tool_call(name, args, id=call_id))
