"""Where the wrapper's added time per call goes, measured in place.

    .venv/bin/python bench/adapter_split.py [--calls 1500]

``bench/adapter_overhead.py`` measures the total a wrapped call adds; this splits it.
The wrapped client's inner SDK ``create`` is timestamped, so each wrapped call splits
into the bookkeeping before the request is sent (``pre``), the SDK's own call
(``inner``), and the bookkeeping after the response (``post``). Wrapped and unwrapped
calls alternate one by one against the same loopback fake server (in its own
process), so both run with the caches as an agent loop leaves them; the split is done
for the default wrapper (a plain-JSON history skips the SDK's request transform) and
for ``sdk_transform=True`` (the SDK transforms the caller's list, as unwrapped). A
second part times the SDK alone, plain against ``extra_body`` (how the wrapper sends
the history): what ``extra_body`` costs by itself, with the same messages, with the
notice, and with the SDK's own argument left empty (no transform), as the wrapper does.
Reported: medians over all calls, in microseconds.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import httpx
import openai
from adapter_overhead import MESSAGES, loopback_server
from budgetmix import Budget, BudgetController
from budgetmix.adapters import budgeted

NOTICE = {"role": "user", "content": "Budget (v1): turn 1 of 9, 9 turns left including this one."}


def _us(xs: list[float]) -> float:
    return statistics.median(xs) * 1e6


def split(base_url: str, calls: int, *, sdk_transform: bool) -> dict[str, float]:
    """Median pre / inner / post of a wrapped call, and the unwrapped call next to it."""
    pool = httpx.HTTPTransport()

    def client() -> openai.OpenAI:
        return openai.OpenAI(
            base_url=base_url,
            api_key="bench",
            max_retries=0,
            http_client=httpx.Client(transport=pool),
        )

    controller = BudgetController(Budget(turns=10 * calls + 100))
    plain, wrapped = client(), budgeted(client(), controller, sdk_transform=sdk_transform)
    inner = wrapped._raw_client.chat.completions  # the SDK endpoint the wrapper calls
    create = inner.create
    marks: list[float] = []

    def timed_create(**kwargs: Any) -> Any:
        marks.append(time.perf_counter())
        try:
            return create(**kwargs)
        finally:
            marks.append(time.perf_counter())

    inner.create = timed_create  # an instance attribute: only this client is timed
    out: dict[str, list[float]] = {"pre": [], "inner": [], "post": [], "unwrapped": []}
    with controller.episode():
        for i in range(calls + 50):
            marks.clear()
            start = time.perf_counter()
            wrapped.chat.completions.create(model="gpt-4o", messages=MESSAGES)
            end = time.perf_counter()
            t0 = time.perf_counter()
            plain.chat.completions.create(model="gpt-4o", messages=MESSAGES)
            t1 = time.perf_counter()
            if i >= 50:  # warm-up
                out["pre"].append(marks[0] - start)
                out["inner"].append(marks[1] - marks[0])
                out["post"].append(end - marks[1])
                out["unwrapped"].append(t1 - t0)
    return {k: _us(v) for k, v in out.items()}


def extra_body_cost(base_url: str, calls: int) -> dict[str, float]:
    """The SDK alone: plain messages against the same request through ``extra_body``."""
    sdk = openai.OpenAI(base_url=base_url, api_key="bench", max_retries=0).chat.completions
    variants: dict[str, Callable[[], Any]] = {
        "plain": lambda: sdk.create(model="gpt-4o", messages=MESSAGES),
        "extra_body, same messages": lambda: sdk.create(
            model="gpt-4o", messages=MESSAGES, extra_body={"messages": list(MESSAGES)}
        ),
        "extra_body, with the notice": lambda: sdk.create(
            model="gpt-4o", messages=MESSAGES, extra_body={"messages": [*MESSAGES, NOTICE]}
        ),
        "extra_body only, with the notice (no transform)": lambda: sdk.create(
            model="gpt-4o", messages=[], extra_body={"messages": [*MESSAGES, NOTICE]}
        ),
    }
    times: dict[str, list[float]] = {k: [] for k in variants}
    for i in range(calls + 50):
        for name, fn in variants.items():
            t0 = time.perf_counter()
            fn()
            if i >= 50:
                times[name].append(time.perf_counter() - t0)
    return {k: _us(v) for k, v in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1500, help="calls per variant")
    args = parser.parse_args(argv)
    with loopback_server("process") as url:
        default = split(url, args.calls, sdk_transform=False)
        transform = split(url, args.calls, sdk_transform=True)
        sdk = extra_body_cost(url, args.calls)
    print(f"### A wrapped first-turn call, split in place (medians of {args.calls} calls)\n")
    print("| part (us) | default | sdk_transform=True |\n|---|---:|---:|")
    for name in ("pre", "inner", "post"):
        print(f"| {name} | {default[name]:.1f} | {transform[name]:.1f} |")
    print(
        f"| unwrapped call, alternating | {default['unwrapped']:.1f}"
        f" | {transform['unwrapped']:.1f} |"
    )
    print(
        f"| inner - unwrapped | {default['inner'] - default['unwrapped']:+.1f}"
        f" | {transform['inner'] - transform['unwrapped']:+.1f} |"
    )
    print("\n### The SDK alone: what extra_body costs\n")
    print("| request | us | vs plain |\n|---|---:|---:|")
    for name, us in sdk.items():
        print(f"| {name} | {us:.1f} | {us - sdk['plain']:+.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
