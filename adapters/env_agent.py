"""Play an environment with a chat model: :class:`ChatModelEnvAgent`.

It wraps any :class:`~budgetmix.adapters.base.ChatModel` or
:class:`~budgetmix.adapters.base.AsyncChatModel` as a
:class:`~budgetmix.environment.EnvAgent`: the model sees the environment's
instructions as the system message, every observation as a user message, its
own earlier actions as assistant messages, and the notice (ephemeral, injected
by the model adapter); its reply text is the action. ``use_async`` selects
``acomplete`` over ``complete``. Provider failures are retried with a
:class:`~budgetmix.RetryPolicy`; the last one is raised as
:class:`~budgetmix.ProviderError`, which the evaluator records as the episode's
``provider_error`` outcome.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable

from budgetmix.adapters.base import AsyncChatModel, ChatMessage, ChatModel, ModelResponse
from budgetmix.environment import AgentReply, Environment
from budgetmix.exceptions import BudgetmixError, ConfigError
from budgetmix.provider_errors import map_provider_error
from budgetmix.retry import RetryPolicy, acall_with_retry, call_with_retry

__all__ = ["ChatModelEnvAgent"]


class ChatModelEnvAgent:
    """Plays an environment with a chat model; its reply text is the action.

    Args:
        model: a :class:`ChatModel` (``complete``) or :class:`AsyncChatModel` (``acomplete``).
        sees_budget: pass the notice to the model (``False``: never, budget-blind).
        system_prompt: prepended to the environment's instructions.
        retry: retry policy of provider calls.
        usd_per_mtok_in / usd_per_mtok_out: prices for the cost columns.
        max_history_turns: keep only the last N observation/action pairs (``None``: all).
        use_async: call ``acomplete`` (default: only when the model has no ``complete``;
            a model with both, like ``OpenAIChatModel``, needs the matching client).

    Raises:
        ConfigError: ``model`` has neither ``complete`` nor ``acomplete``, or
            ``use_async`` without ``acomplete``.
    """

    def __init__(
        self,
        model: ChatModel | AsyncChatModel,
        *,
        sees_budget: bool = True,
        system_prompt: str = "",
        retry: RetryPolicy | None = None,
        usd_per_mtok_in: float = 0.0,
        usd_per_mtok_out: float = 0.0,
        max_history_turns: int | None = None,
        use_async: bool | None = None,
    ) -> None:
        if not hasattr(model, "complete") and not hasattr(model, "acomplete"):
            raise ConfigError("model must have complete() or acomplete()")
        self.model = model
        self.sees_budget = sees_budget
        self.system_prompt = system_prompt
        self.retry = retry if retry is not None else RetryPolicy()
        self.prices = (usd_per_mtok_in, usd_per_mtok_out)
        self.max_history_turns = max_history_turns
        self._messages: list[ChatMessage] = []
        self._rng = random.Random(0)
        if use_async is None:
            use_async = hasattr(model, "acomplete") and not hasattr(model, "complete")
        if use_async and not hasattr(model, "acomplete"):
            raise ConfigError("use_async=True needs a model with acomplete()")
        if use_async:
            self.act = self._act_async  # type: ignore[method-assign,assignment]

    def start(self, env: Environment, seed: int) -> None:
        """Begin an episode of ``env``: the system prompt and the environment's instructions."""
        text = "\n\n".join(p for p in (self.system_prompt, env.instructions()) if p)
        self._messages = [ChatMessage(role="system", content=text)]
        self._rng = random.Random(seed)

    def _request(self, observation: str) -> list[ChatMessage]:
        history = self._messages[1:]
        if self.max_history_turns is not None:
            history = history[len(history) - 2 * self.max_history_turns :] if history else []
        return [self._messages[0], *history, ChatMessage(role="user", content=observation)]

    def _commit(self, request: list[ChatMessage], response: ModelResponse) -> AgentReply:
        self._messages.extend([request[-1], ChatMessage(role="assistant", content=response.text)])
        tin = response.usage.input_tokens if response.usage else 0
        tout = response.usage.output_tokens if response.usage else 0
        cost = (tin * self.prices[0] + tout * self.prices[1]) / 1e6
        return AgentReply(text=response.text, input_tokens=tin, output_tokens=tout, cost_usd=cost)

    def act(
        self, observation: str, notice: str | None, turns_remaining: int | None
    ) -> str | AgentReply:
        """The model's reply to ``observation`` (with the notice shown), as the next action."""
        request = self._request(observation)
        shown = notice if self.sees_budget else None
        complete: Callable[..., ModelResponse] = self.model.complete
        try:
            response = call_with_retry(
                lambda: complete(request, (), notice=shown), self.retry, rng=self._rng
            )
        except BudgetmixError:
            raise
        except Exception as exc:
            raise map_provider_error(exc) from exc
        return self._commit(request, response)

    async def _act_async(
        self, observation: str, notice: str | None, turns_remaining: int | None
    ) -> str | AgentReply:
        request = self._request(observation)
        shown = notice if self.sees_budget else None
        acomplete: Callable[..., Awaitable[ModelResponse]] = self.model.acomplete  # type: ignore[union-attr]

        async def once() -> ModelResponse:
            return await acomplete(request, (), notice=shown)

        try:
            response = await acall_with_retry(once, self.retry, rng=self._rng)
        except BudgetmixError:
            raise
        except Exception as exc:
            raise map_provider_error(exc) from exc
        return self._commit(request, response)
