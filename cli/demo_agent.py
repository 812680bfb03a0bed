"""The demo's production-style agent: real tool functions and a scripted model.

A customer-support agent looks up an order, checks stock, and quotes a
delivery date. The model is :class:`~budgetmix.adapters.testing.scripted.MistakeThenRecover`
(a test double shipped in the package) that slips up at a seeded rate (invalid
JSON, unknown tools, bad arguments) and then recovers, so budgets, notices,
mistakes and recoveries all show without an API key. :class:`RepeatsMistakes`
makes it sometimes send a failed call again unchanged, as agents stuck on one
failing call do, so early-stop policies have something to stop.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from budgetmix._validate import check_between
from budgetmix.budget import Budget
from budgetmix.controller import BudgetController
from budgetmix.events import EpisodeResult

if TYPE_CHECKING:
    from budgetmix.adapters.base import ChatMessage, ModelResponse, ToolCallRequest, ToolSpec
    from budgetmix.adapters.testing.scripted import MistakeThenRecover

__all__ = ["RepeatsMistakes", "SupportRun", "run_support_episodes"]

_ORDERS = {"A-1001": "SKU-7", "A-1002": "SKU-3", "A-1003": "SKU-9"}
_STOCK = {"SKU-7": 4, "SKU-3": 0, "SKU-9": 12}

#: How often the support model sends a failed call again unchanged (a stuck agent).
REPEAT_RATE = 0.2


def lookup_order(order_id: str) -> str:
    """Return the SKU of an order."""
    if order_id not in _ORDERS:
        raise KeyError(f"no order {order_id}")
    return _ORDERS[order_id]


def check_stock(sku: str) -> int:
    """Units of ``sku`` in the warehouse."""
    return _STOCK[sku]


def delivery_days(sku: str, express: bool = False) -> int:
    """Days until delivery of ``sku``."""
    base = 2 if _STOCK[sku] > 0 else 9
    return max(1, base - 1) if express else base


class RepeatsMistakes:
    """A scripted support model that can get stuck: ``inner``, except that on the turn
    after a failed tool call it sends that call again unchanged with probability
    ``repeat_rate`` (drawn from ``seed`` and the turn's position: reproducible). A
    streak of one mistake kind is what ``StopOnRepeatedMistakes`` ends early.

    Raises:
        ConfigError: ``repeat_rate`` outside [0, 1].
    """

    def __init__(self, inner: MistakeThenRecover, *, repeat_rate: float, seed: int) -> None:
        self.inner = inner
        self.repeat_rate = check_between("repeat_rate", repeat_rate, 0.0, 1.0)
        self.seed = seed

    def __call__(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
        notice: str | None,
        *,
        tool_choice: Literal["auto", "none"] = "auto",
    ) -> ModelResponse:
        """The next response: the failed call again, or whatever ``inner`` answers."""
        from budgetmix.adapters.testing.scripted import tool_call, tool_calls

        failed = _failed_calls(messages)
        position = sum(1 for m in messages if m.role == "assistant")
        rng = random.Random(f"{self.seed}:repeat:{position}")
        if failed and tool_choice != "none" and rng.random() < self.repeat_rate:
            return tool_calls(
                *(
                    tool_call(c.name, c.arguments, id=f"call_{position + 1}_{i}")
                    for i, c in enumerate(failed)
                )
            )
        return self.inner(messages, tools, notice, tool_choice=tool_choice)


def _failed_calls(messages: Sequence[ChatMessage]) -> tuple[ToolCallRequest, ...]:
    """The calls of the latest assistant message when all of its results failed."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role == "assistant":
            results = messages[i + 1 :]
            if messages[i].tool_calls and results and all(m.is_error for m in results):
                return messages[i].tool_calls
            return ()
    return ()


@dataclass(frozen=True, slots=True)
class SupportRun:
    """One demo episode: its seed, budget and result."""

    seed: int
    turns: int
    result: EpisodeResult
    output: str | None


def run_support_episodes(
    budgets: list[int],
    seeds: list[int],
    controller_kwargs: dict[str, object],
    *,
    mistake_rate: float = 0.35,
    repeat_rate: float = REPEAT_RATE,
) -> list[SupportRun]:
    """Run the support agent for every (budget, seed) under a controller built
    with ``controller_kwargs`` (from :func:`budgetmix.policies.build_controller_kwargs`).

    The model slips up with probability ``mistake_rate`` per turn and, after a failed
    call, sends it again with probability ``repeat_rate`` (:class:`RepeatsMistakes`).
    """
    from budgetmix.adapters.loop import run_agent
    from budgetmix.adapters.testing.scripted import MistakeThenRecover, ScriptedModel

    runs: list[SupportRun] = []
    for turns in budgets:
        controller = BudgetController(
            Budget(turns=turns, tool_calls=2 * turns),
            name="support-agent",
            provider_name="scripted",
            **controller_kwargs,  # type: ignore[arg-type]
        )
        for seed in seeds:
            order = sorted(_ORDERS)[seed % len(_ORDERS)]
            sku = _ORDERS[order]
            plan: list[tuple[str, dict[str, object]]] = [
                ("lookup_order", {"order_id": order}),
                ("check_stock", {"sku": sku}),
                ("delivery_days", {"sku": sku, "express": True}),
            ]
            answer = f"Order {order} ({sku}) arrives in {delivery_days(sku, True)} day(s)."
            inner = MistakeThenRecover(plan, answer, mistake_rate=mistake_rate, seed=seed)
            model = ScriptedModel(
                RepeatsMistakes(inner, repeat_rate=repeat_rate, seed=seed),
                model_name="scripted-support",
            )
            run = run_agent(
                model,
                [lookup_order, check_stock, delivery_days],
                f"When will order {order} arrive?",
                controller,
                name="support-agent",
                metadata={"seed": seed, "budget": turns},
                # one chat session per episode: a backend's sessions view lists them
                conversation_id=f"support-{order}-T{turns}-seed{seed}",
            )
            runs.append(SupportRun(seed, turns, run.result, run.output))
    return runs
