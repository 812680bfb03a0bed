"""``budgetmix notice``: print the exact notice bytes for a budget state."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from budgetmix.budget import Budget
from budgetmix.cli._errors import CliParser, UsageError, blame, integer, run_command
from budgetmix.ledger import fixed_clock_ledger
from budgetmix.notice import DEFAULT_NOTICE_FORMAT, NOTICE_FORMATS, render_notice

__all__ = ["NoticeRequest", "notice_main", "parse_notice_args"]

PROG = "budgetmix notice"


@dataclass(frozen=True, slots=True)
class NoticeRequest:
    """A validated ``budgetmix notice`` command line."""

    budget: Budget
    turn: int
    format: str
    all: bool


def _parser() -> CliParser:
    parser = CliParser(prog=PROG, description="Print the budget notice the model would see.")
    parser.add_argument("--turns", type=int, default=5, help="turn limit T")
    parser.add_argument("--turn", type=int, default=1, help="1-based turn in progress")
    parser.add_argument("--tool-calls", type=int, default=None, help="tool-call limit")
    parser.add_argument(
        "--format", default=DEFAULT_NOTICE_FORMAT, choices=sorted(NOTICE_FORMATS), help="format id"
    )
    parser.add_argument("--all", action="store_true", help="print the notice of every turn")
    return parser


def parse_notice_args(argv: Sequence[str]) -> NoticeRequest:
    """The validated request ``argv`` describes.

    Raises:
        UsageError: a value out of range; the message names the flag.
        SystemExit: argparse's own errors (exit status 2, one stderr line) and ``--help``.
    """
    args = _parser().parse_args(list(argv))
    turns = integer("--turns", args.turns, low=1)
    if args.tool_calls is not None:
        integer("--tool-calls", args.tool_calls, low=1)
    with blame("--tool-calls"):
        budget = Budget(turns=turns, tool_calls=args.tool_calls)
    if not 1 <= args.turn <= turns:
        raise UsageError("--turn", f"must lie in 1..{turns}, got {args.turn}")
    return NoticeRequest(budget=budget, turn=args.turn, format=args.format, all=args.all)


def _print_notices(request: NoticeRequest) -> int:
    ledger = fixed_clock_ledger(request.budget)
    last = request.budget.turns if request.all else request.turn
    for n in range(1, last + 1):
        ledger.try_charge_turn()
        if request.all or n == request.turn:
            print(render_notice(ledger.state(in_turn=True), request.format))
    return 0


def notice_main(argv: Sequence[str]) -> int:
    """Print the notice shown at ``--turn`` of ``--turns`` (every turn with ``--all``).

    Returns 0, or 2 after one stderr line naming the bad flag.
    """
    return run_command(PROG, lambda: _print_notices(parse_notice_args(argv)))
