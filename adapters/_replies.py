"""What the HTTP transport raises by itself, without the provider.

Budgetmix's own errors (a refused turn, a refused request, an unreadable response) are
raised as subclasses of the loaded SDKs' base error classes too (:func:`sdk_safe`), so
the OpenAI and Anthropic clients raise them as they are instead of wrapping them in a
connection error and retrying; an error status is raised as :class:`HTTPStatusFailure`
so the retry policy can classify it. (The final assistant message a refused turn is
answered with in ``on_exhausted="respond"`` mode is written by the wire format's
module: :func:`budgetmix.adapters._wire.terminal_body`.)
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from budgetmix.exceptions import (
    BudgetExhausted,
    BudgetmixError,
    ConfigError,
    EarlyStopped,
    ProviderError,
)

__all__ = ["HTTPStatusFailure", "refused", "sdk_safe"]


_SAFE_CLASSES: dict[tuple[type[Exception], ...], type[Exception]] = {}


def _sdk_safe_class(
    base: type[Exception], sdk_bases: tuple[type[Exception], ...]
) -> type[Exception]:
    key = (base, *sdk_bases)
    cls = _SAFE_CLASSES.get(key)
    if cls is None:
        cls = _SAFE_CLASSES[key] = type(base.__name__, key, {"__module__": base.__module__})
    return cls


def sdk_safe(exc: BaseException) -> BaseException:
    """One of budgetmix's errors (a stop, a refused request, an unreadable response) as
    a subclass of the loaded SDKs' base errors too, so the SDKs raise it as is instead of
    wrapping it in a connection error and retrying; any other exception unchanged."""
    if not isinstance(exc, BudgetmixError):
        return exc
    bases = tuple(
        getattr(sys.modules[mod], name)
        for mod, name in (("openai", "OpenAIError"), ("anthropic", "AnthropicError"))
        if mod in sys.modules and hasattr(sys.modules[mod], name)
    )
    if not bases:
        return exc
    cls: Callable[..., BaseException] = _sdk_safe_class(type(exc), bases)  # exc's own signature
    if isinstance(exc, BudgetExhausted):
        return cls(exc.dimension, exc.used, exc.limits, exc.transcript, exc.episode_id)
    if isinstance(exc, EarlyStopped):
        return cls(exc.reason, exc.episode_id)
    if isinstance(exc, ProviderError):
        return cls(str(exc), status_code=exc.status_code, retryable=exc.retryable)
    return cls(str(exc))


def refused(what: str) -> BaseException:
    """A budgeted request refused before anything was sent (no turn charged)."""
    return sdk_safe(ConfigError(f"request body: {what}; budgetmix refused it (nothing was sent)"))


class HTTPStatusFailure(Exception):
    """An error-status response, raised so the retry policy can classify it."""

    def __init__(self, response: Any) -> None:
        super().__init__(f"HTTP {response.status_code}")
        self.response = response
        self.status_code: int = response.status_code
