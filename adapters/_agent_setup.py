"""What a run of the built-in agent loop checks and opens before its first turn.

:func:`prepare` validates the arguments :func:`~budgetmix.adapters.run_agent` and
:func:`~budgetmix.adapters.arun_agent` share, builds the controller when given a
:class:`~budgetmix.Budget`, opens the episode, adds the ``request_more_turns`` tool when
the extension grants on demand, and checks the opening conversation can be sent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Annotated, Any

import pydantic
from budgetmix._validate import check_int
from budgetmix.accounting import DEFAULT_ACCOUNTING
from budgetmix.adapters.base import ChatMessage, ToolSpec
from budgetmix.adapters.tools import Tool, Toolbox, sendable_text
from budgetmix.budget import Budget
from budgetmix.controller import BudgetController
from budgetmix.episode import Episode
from budgetmix.exceptions import ConfigError
from budgetmix.policy import ExhaustionMode, ExtensionPolicy

__all__ = ["ToolLike", "prepare"]

ToolLike = Tool | Callable[..., Any]


def _controller(
    budget: Budget | BudgetController,
    exhaustion: ExhaustionMode | None,
    extension: ExtensionPolicy | None,
    provider_name: str | None,
) -> BudgetController:
    if isinstance(budget, BudgetController):
        if exhaustion is not None and exhaustion != budget.exhaustion:
            raise ConfigError(
                f"exhaustion: the controller was built with {budget.exhaustion!r}; "
                "set it on the BudgetController, not run_agent"
            )
        if extension is not None and extension is not budget.extension:
            raise ConfigError("extension: set it on the BudgetController, not run_agent")
        return budget
    if not isinstance(budget, Budget):
        raise ConfigError(f"budget must be a Budget or BudgetController, got {budget!r}")
    from budgetmix.policies.extension import find_on_demand, with_free_request_tool

    return BudgetController(
        budget,
        exhaustion=exhaustion or "end",
        extension=extension,
        # asking for more turns is budget management, not work: it costs no tool call
        accounting=with_free_request_tool() if find_on_demand(extension) else DEFAULT_ACCOUNTING,
        provider_name=provider_name,
    )


def _check_text(where: str, text: Any) -> None:
    if not isinstance(text, str):
        raise ConfigError(f"{where} must be a string, got {type(text).__name__}")
    if sendable_text(text) != text:
        raise ConfigError(f"{where} has a lone surrogate, which cannot be encoded to send")


def _history(task: str | Sequence[ChatMessage], system: str | None) -> list[ChatMessage]:
    if isinstance(task, str):
        _check_text("task", task)
        messages = [ChatMessage(role="user", content=task)]
    else:
        messages = list(task)  # a copy: the caller's list is never mutated
        for i, m in enumerate(messages):
            if not isinstance(m, ChatMessage):
                raise ConfigError(f"task messages must be ChatMessage, got {m!r}")
            _check_text(f"task[{i}].content", m.content)
        if not messages:
            raise ConfigError("task must be a string or a non-empty message list")
    if system is not None:
        _check_text("system", system)
        messages.insert(0, ChatMessage(role="system", content=system))
    return messages


def prepare(
    model: Any,
    tools: Toolbox | Iterable[ToolLike],
    task: str | Sequence[ChatMessage],
    budget: Budget | BudgetController,
    *,
    system: str | None,
    max_parallel: int,
    exhaustion: ExhaustionMode | None,
    extension: ExtensionPolicy | None,
    name: str | None,
    metadata: dict[str, Any] | None,
    conversation_id: str | None = None,
) -> tuple[Episode, Toolbox, list[ChatMessage]]:
    """The episode a run charges, its toolbox (with ``request_more_turns`` when the
    extension grants on demand) and its opening conversation.

    Raises:
        ConfigError: an argument is invalid (the message names it).
    """
    check_int("max_parallel", max_parallel, minimum=1)
    entries = list(tools.values()) if isinstance(tools, Toolbox) else list(tools)
    controller = _controller(budget, exhaustion, extension, getattr(model, "provider_name", None))
    episode = controller.episode(name=name, metadata=metadata, conversation_id=conversation_id)
    extra = _request_more_turns_tool(controller, episode)
    return episode, Toolbox([*entries, *extra]), _history(task, system)


def _request_more_turns_tool(controller: BudgetController, episode: Episode) -> list[Tool]:
    """The ``request_more_turns`` tool when the controller's extension grants on demand."""
    from budgetmix.policies.extension import (
        REQUEST_MORE_TURNS,
        find_on_demand,
        request_more_turns_tool,
    )

    policy = find_on_demand(controller.extension)
    if policy is None:
        return []

    def request_more_turns(turns: Annotated[int, pydantic.Field(ge=1)]) -> str:
        return policy.run_tool(episode, {"turns": turns})

    tool = Tool.from_function(request_more_turns, name=REQUEST_MORE_TURNS)
    # The policy's own spec, so every adapter shows the model the same bytes.
    return [replace(tool, spec=ToolSpec(**request_more_turns_tool()))]
