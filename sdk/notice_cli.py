"""``budgetmix notice``: print the exact notice bytes for a budget state."""

from __future__ import annotations

import argparse

from budgetmix.budget import Budget
from budgetmix.ledger import Ledger
from budgetmix.notice import DEFAULT_NOTICE_FORMAT, NOTICE_FORMATS, render_notice

__all__ = ["notice_main"]


def notice_main(argv: list[str]) -> int:
    """Print the notice shown at ``--turn`` of ``--turns`` (every turn with ``--all``)."""
    parser = argparse.ArgumentParser(
        prog="budgetmix notice", description="Print the budget notice the model would see."
    )
    parser.add_argument("--turns", type=int, default=5, help="turn limit T")
    parser.add_argument("--turn", type=int, default=1, help="1-based turn in progress")
    parser.add_argument("--tool-calls", type=int, default=None, help="tool-call limit")
    parser.add_argument(
        "--format", default=DEFAULT_NOTICE_FORMAT, choices=sorted(NOTICE_FORMATS), help="format id"
    )
    parser.add_argument("--all", action="store_true", help="print the notice of every turn")
    args = parser.parse_args(argv)
    budget = Budget(turns=args.turns, tool_calls=args.tool_calls)
    if not 1 <= args.turn <= args.turns:
        parser.error(f"--turn must lie in 1..{args.turns}")
    ledger = Ledger(budget, clock=lambda: 0.0)
    last = args.turns if args.all else args.turn
    for n in range(1, last + 1):
        ledger.try_charge_turn()
        if args.all or n == args.turn:
            print(render_notice(ledger.state(in_turn=True), args.format))
    return 0
