"""``budgetmix voi``: the value of knowing the budget for a design, exactly (the VoI gate).

Prints, per budget fraction of the ceiling, the exact success of the best
budget-aware and of the best budget-blind policy for an agent that takes a
random other action with probability ``--error-rate``, and their difference
(:mod:`budgetmix.training.diagnostics.voi`). With ``--gate POINTS`` the exit status is
1 when the VoI at 25% or 50% is below ``POINTS`` (the design gate).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from budgetmix.cli._errors import (
    CliParser,
    blame,
    choice,
    integer,
    json_object,
    number,
    run_command,
)

__all__ = ["voi_main"]

PROG = "budgetmix voi"


def _parser() -> CliParser:
    p = CliParser(prog=PROG, description="The value of knowing the budget, exactly, per budget.")
    p.add_argument("--env", default="frozenlake-compact", help="a compact environment")
    p.add_argument("--env-kwargs", default="{}", help="the environment's keyword arguments (JSON)")
    p.add_argument("--error-rate", type=float, default=0.3, help="the agent's error rate e")
    p.add_argument(
        "--fractions",
        type=float,
        nargs="+",
        default=[0.25, 0.5, 0.75, 1.0],
        help="budget fractions of the ceiling",
    )
    p.add_argument("--ceiling", type=int, default=None, help="the ceiling (default: the env's)")
    p.add_argument("--gate", type=float, default=None, help="exit 1 below POINTS at 25%% and 50%%")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return p


def _run(argv: Sequence[str]) -> int:
    from budgetmix.training.diagnostics.voi import EXACT_MODELS, env_voi, gate

    args = _parser().parse_args(list(argv))
    choice("--env", args.env, sorted(EXACT_MODELS))
    kwargs = json_object("--env-kwargs", args.env_kwargs)
    e = number("--error-rate", args.error_rate, low=0.0, high=1.0)
    ceiling = None if args.ceiling is None else integer("--ceiling", args.ceiling, low=1)
    threshold = None if args.gate is None else number("--gate", args.gate, low=0.0, high=100.0)
    for f in args.fractions:
        number("--fractions", f, low=0.0, high=1.0)
    with blame("--env-kwargs"):
        table = env_voi(args.env, e, env_kwargs=kwargs, fractions=args.fractions, ceiling=ceiling)
    verdict = None
    if threshold is not None:
        with blame("--fractions"):
            verdict = gate(table, threshold=threshold / 100)
    if args.json:
        out = table.to_dict()
        if verdict is not None:
            out["gate"] = verdict.to_dict()
        print(json.dumps(out, indent=2))
    else:
        print(table.format())
        if verdict is not None:
            print(f"gate: {'PASS' if verdict.passed else 'FAIL'} -- {verdict.reason}")
    return 0 if verdict is None or verdict.passed else 1


def voi_main(argv: Sequence[str]) -> int:
    """``budgetmix voi [--env NAME] [--error-rate E] [--gate POINTS]``; the exit status."""
    return run_command(PROG, lambda: _run(argv))
