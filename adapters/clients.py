"""Budgets for the provider SDK clients you already use: one :func:`budgeted` for all.

::

    from budgetmix.adapters import budgeted

    client = budgeted(openai.OpenAI(), controller)        # or AsyncOpenAI, Anthropic, ...
    with controller.episode():
        client.chat.completions.create(model="gpt-4o", messages=history)

What a wrapped client budgets is described in :mod:`budgetmix.adapters.openai` and
:mod:`budgetmix.adapters.anthropic`; both build on one budgeted endpoint
(:mod:`budgetmix.adapters._endpoints`). No request path of a wrapped client skips the
budget: whatever else reaches a model endpoint (the SDK's low-level ``post``, which
LiteLLM sends through, ``with_streaming_response``, ``beta.*``) is budgeted at the HTTP
layer, and what no wire format here reads (legacy completions, WebSocket sessions) is
refused inside an episode (:mod:`budgetmix.adapters._gate`).
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, overload

from budgetmix._deps import require
from budgetmix.adapters._endpoints import ClientWrapper, Target
from budgetmix.adapters.anthropic import AsyncBudgetedAnthropic, BudgetedAnthropic
from budgetmix.adapters.openai import AsyncBudgetedOpenAI, BudgetedOpenAI
from budgetmix.adapters.pricing import Pricing

if TYPE_CHECKING:
    import anthropic
    import openai

__all__ = ["budgeted"]

SyncSleep = Callable[[float], None]
AsyncSleep = Callable[[float], Awaitable[None]]


@overload
def budgeted(
    client: openai.AsyncOpenAI,
    target: Target = ...,
    *,
    pricing: Pricing | None = ...,
    sleep: AsyncSleep | None = ...,
    sdk_transform: bool = ...,
) -> AsyncBudgetedOpenAI: ...
@overload
def budgeted(
    client: openai.OpenAI,
    target: Target = ...,
    *,
    pricing: Pricing | None = ...,
    sleep: SyncSleep | None = ...,
    sdk_transform: bool = ...,
) -> BudgetedOpenAI: ...
@overload
def budgeted(
    client: anthropic.AsyncAnthropic,
    target: Target = ...,
    *,
    pricing: Pricing | None = ...,
    sleep: AsyncSleep | None = ...,
    sdk_transform: bool = ...,
) -> AsyncBudgetedAnthropic: ...
@overload
def budgeted(
    client: anthropic.Anthropic,
    target: Target = ...,
    *,
    pricing: Pricing | None = ...,
    sleep: SyncSleep | None = ...,
    sdk_transform: bool = ...,
) -> BudgetedAnthropic: ...
def budgeted(
    client: openai.OpenAI | openai.AsyncOpenAI | anthropic.Anthropic | anthropic.AsyncAnthropic,
    target: Target = None,
    *,
    pricing: Pricing | None = None,
    sleep: SyncSleep | AsyncSleep | None = None,
    sdk_transform: bool = False,
) -> ClientWrapper:
    """Wrap an OpenAI or Anthropic client so calls inside an episode are budgeted.

    Args:
        client: an ``openai.OpenAI`` / ``openai.AsyncOpenAI`` (or a compatible server's)
            or an ``anthropic.Anthropic`` / ``anthropic.AsyncAnthropic``.
        target: the :class:`~budgetmix.Episode` to charge, a
            :class:`~budgetmix.BudgetController` (its current episode), or ``None``
            (whatever episode is current).
        pricing: prices for cost (default :data:`~budgetmix.adapters.DEFAULT_PRICING`).
        sleep: waits between retries (tests inject a recorder).
        sdk_transform: hand the SDK your messages to transform, as an unwrapped call
            does. By default a plain-JSON history (dicts, lists, strings, numbers) is
            sent as is, byte for byte what that transform would produce, without its
            cost (0.1–0.2 ms per message with ``openai``). Set it when code that patches
            the SDK's ``create`` (third-party instrumentation) must see the messages.

    Raises:
        MissingExtraError: ``client`` is no Anthropic client and ``openai`` is not
            installed.
    """
    cls: type[ClientWrapper]
    sdk = sys.modules.get("anthropic")  # a client of a loaded SDK; never import one here
    if sdk is not None and isinstance(client, (sdk.Anthropic, sdk.AsyncAnthropic)):
        is_async = isinstance(client, sdk.AsyncAnthropic)
        cls = AsyncBudgetedAnthropic if is_async else BudgetedAnthropic
    else:
        sdk = require("openai", "openai")
        cls = AsyncBudgetedOpenAI if isinstance(client, sdk.AsyncOpenAI) else BudgetedOpenAI
    return cls(client, target, pricing=pricing, sleep=sleep, sdk_transform=sdk_transform)
