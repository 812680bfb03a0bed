"""The demo's production-style agent: real tool functions and a scripted model.

A customer-support agent looks up an order, checks stock, and quotes a
delivery date. The model is :class:`~budgetmix.adapters.testing.scripted.MistakeThenRecover`
(a test double shipped in the package) that slips up at a seeded rate (invalid
JSON, unknown tools, bad arguments) and then recovers, so budgets, notices,
mistakes and recoveries all show without an API key.
"""

from __future__ import annotations

from dataclasses import dataclass

from budgetmix.budget import Budget
from budgetmix.controller import BudgetController
from budgetmix.events import EpisodeResult

__all__ = ["SupportRun", "run_support_episodes"]

_ORDERS = {"A-1001": "SKU-7", "A-1002": "SKU-3", "A-1003": "SKU-9"}
_STOCK = {"SKU-7": 4, "SKU-3": 0, "SKU-9": 12}


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
) -> list[SupportRun]:
    """Run the support agent for every (budget, seed) under a controller built
    with ``controller_kwargs`` (from :func:`budgetmix.policies.build_controller_kwargs`)."""
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
            model = ScriptedModel(
                MistakeThenRecover(plan, answer, mistake_rate=mistake_rate, seed=seed),
                model_name="scripted-support",
            )
            run = run_agent(
                model,
                [lookup_order, check_stock, delivery_days],
                f"When will order {order} arrive?",
                controller,
                name="support-agent",
                metadata={"seed": seed, "budget": turns},
            )
            runs.append(SupportRun(seed, turns, run.result, run.output))
    return runs
