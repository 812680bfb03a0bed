"""What both drivers of :mod:`budgetmix.adapters.loop` share besides the loop's core:
content capture of a turn, replies made sendable, the sync tool pool, and the check
that a model trained with budgetmix runs under the notice layout it was trained on."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from budgetmix.adapters.base import ChatMessage, ModelRequest, ModelResponse, ToolCallRequest
from budgetmix.adapters.tools import sendable_text
from budgetmix.exceptions import ConfigError
from budgetmix.policy import NoticePolicy, notice_placement
from budgetmix.steps import Turn

__all__ = [
    "check_trained_grace",
    "check_trained_notice",
    "record_content",
    "sendable",
    "tool_pool",
]


def record_content(turn: Turn, sent: ModelRequest, response: ModelResponse) -> None:
    """The turn's request and reply on its span (content capture): the history as sent,
    an ephemeral notice as the trailing user message the model adapter adds."""
    messages: list[ChatMessage] = list(sent.messages)
    if sent.notice:
        messages.append(ChatMessage(role="user", content=sent.notice))
    reply = ChatMessage(role="assistant", content=response.text, tool_calls=response.tool_calls)
    turn.record_content(
        input_messages=messages, output_messages=[reply], finish_reason=response.finish_reason
    )


def sendable(response: ModelResponse) -> ModelResponse:
    """``response`` with its text and tool calls as text an SDK can encode (a lone
    surrogate, which JSON can escape, as U+FFFD); the same object when nothing changes."""
    text = sendable_text(response.text)
    calls = tuple(
        ToolCallRequest(
            id=sendable_text(c.id),
            name=sendable_text(c.name),
            arguments=sendable_text(c.arguments),
        )
        for c in response.tool_calls
    )
    if text == response.text and calls == response.tool_calls:
        return response
    return replace(response, text=text, tool_calls=calls)


@contextlib.contextmanager
def tool_pool(max_parallel: int) -> Iterator[Callable[[], ThreadPoolExecutor]]:
    """A factory of one thread pool for the sync tools, started on first use and shut
    down (its tools finished) when the run ends."""
    pool: list[ThreadPoolExecutor] = []

    def factory() -> ThreadPoolExecutor:
        if not pool:
            pool.append(ThreadPoolExecutor(max_parallel, thread_name_prefix="budgetmix-tool"))
        return pool[0]

    try:
        yield factory
    finally:
        for p in pool:
            p.shutdown(wait=True)


def check_trained_grace(model: object, exhaustion: str) -> None:
    """Refuse a grace turn for a model trained without one.

    A model whose ``trained_grace_turn`` is ``False`` (what
    :func:`budgetmix.training.serving.serve.chat_model` sets for a checkpoint the trainer wrote:
    training rollouts end at the budget, with no grace turn) never saw a grace turn's
    request; ``None`` (or no such attribute) skips the check.

    Raises:
        ConfigError: ``exhaustion`` is ``"grace"`` (the message names the fix).
    """
    if exhaustion == "grace" and getattr(model, "trained_grace_turn", None) is False:
        raise ConfigError(
            f"model {getattr(model, 'model_name', model)!r} was trained without a grace turn "
            "(its training_env.json: grace_turn false), but the controller grants one "
            "(exhaustion='grace'); deploy it with exhaustion='end' or 'raise', or set "
            "model.trained_grace_turn = None to grant one on purpose (docs/layout.md)"
        )


def check_trained_notice(model: object, notice: NoticePolicy) -> None:
    """Refuse to deploy a model with a notice layout other than the one it was trained on.

    A model that declares ``trained_notice`` (a notice policy: what
    :func:`budgetmix.training.serving.serve.chat_model` sets from the checkpoint's
    ``training_env.json``) must run under a controller whose notice policy has the same
    placement and format (which turns get a notice may differ). ``trained_notice = None``
    (or no such attribute) skips the check: set it so to deploy otherwise on purpose.

    Raises:
        ConfigError: the placement or the format differs (the message names both and
            the fix).
    """
    trained = getattr(model, "trained_notice", None)
    if trained is None:
        return
    want = (notice_placement(trained), str(trained.format))
    have = (notice_placement(notice), str(getattr(notice, "format", "")))
    if want != have:
        raise ConfigError(
            f"model {getattr(model, 'model_name', model)!r} was trained with notices placed "
            f"{want[0]!r} in format {want[1]!r}, but the controller's notice policy places "
            f"them {have[0]!r} in format {have[1]!r}; give the controller "
            f"notice=NotifyEveryTurn(format={want[1]!r}, placement={want[0]!r}) "
            "(budgetmix.training.serving.serve.deployment_notice(DIR)), or set "
            "model.trained_notice = None to deploy it otherwise on purpose (docs/layout.md)"
        )
