"""``budgetmix diagnose``: the paper's diagnostics for two policies on slippery FrozenLake.

Policies are checkpoint directories (``budgetmix train`` / the experiment's
``final/`` folders) or the built-in ``oracle`` (budget-aware optimum) and
``blind`` (best budget-blind policy). Reports, with exact finite-horizon Q:

* budget sensitivity: at the start cell, each policy's action distribution as a
  function of the turns left, its share of budget-optimal choices and the
  flip-action sensitivity (oracle 1, budget-blind 0) with its noise floor
  (when the map's start cell has a budget-dependent best move);
* step-level action quality: from the *same states* (those policy B reaches),
  the share of non-tied states where A's expected Q (``--samples`` draws per
  state) beats B's, overall and right after a mistake (a step losing Q), with the
  noise floor beside it;
* success vs budget (budget extrapolation curves) for both;
* recovery injection: an invalid reply forced at a turn, success within the
  budget left.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from budgetmix.cli._errors import (
    CliParser,
    UsageError,
    blame,
    integer,
    model_dir,
    number,
    output_file,
    run_command,
)
from budgetmix.exceptions import BudgetmixError

if TYPE_CHECKING:
    from budgetmix.training.diagnostics.action_quality import ExpectedComparison
    from budgetmix.training.diagnostics.budget_sensitivity import SensitivityResult
    from budgetmix.training.diagnostics.episodes import CurvePoint
    from budgetmix.training.diagnostics.recovery_injection import RecoveryResult
    from rich.table import Table

__all__ = ["DiagnoseOptions", "diagnose_main", "parse_diagnose_args"]

PROG = "budgetmix diagnose"
BUILTIN = ("oracle", "blind")
#: Exact Q is a table over cells; a bigger map is more than a diagnostic needs.
MAX_CELLS = 1024


@dataclass(frozen=True, slots=True)
class DiagnoseOptions:
    """A validated ``budgetmix diagnose`` command line (policies are not loaded yet)."""

    a: str
    b: str
    desc: tuple[str, ...]
    success_rate: float
    budgets: list[int] | None
    episodes: int
    inject_at: int
    out: Path | None
    samples: int = 16


def _policy(flag: str, spec: str, model: Any) -> Any:
    from budgetmix.training.diagnostics.episodes import frozenlake_oracle_policy
    from budgetmix.training.experiment.lm import load_lm_policy

    if spec in BUILTIN:
        return frozenlake_oracle_policy(model, budget_blind=spec == "blind")
    # a damaged checkpoint fails inside the loader: still one line naming the flag
    with blame(flag, BudgetmixError, OSError, ValueError, TypeError):
        return load_lm_policy(spec)[0]


def _ints(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers like 4,7,14, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"budgets must be integers >= 1, got {text!r}")
    return values


def _parser() -> CliParser:
    p = CliParser(
        prog=PROG,
        description="Compare two policies step by step (exact Q) on slippery FrozenLake.",
    )
    p.add_argument("--a", required=True, help="policy A: checkpoint dir, 'oracle' or 'blind'")
    p.add_argument("--b", required=True, help="policy B (its states are compared): same forms")
    p.add_argument("--desc", default="SFF,HFF,HHG", help="map rows, comma-separated")
    p.add_argument(
        "--success-rate", type=float, default=0.8, help="probability a move goes as intended"
    )
    p.add_argument(
        "--budgets",
        type=_ints,
        default=None,
        help="turn budgets (default 25..150%% of the ceiling)",
    )
    p.add_argument("--episodes", type=int, default=64, help="episodes per budget")
    p.add_argument("--inject-at", type=int, default=2, help="turn of the forced mistake")
    p.add_argument("--samples", type=int, default=16, help="draws per state for expected Q")
    p.add_argument("--out", default=None, help="write the numbers as JSON here")
    return p


def parse_diagnose_args(argv: Sequence[str]) -> DiagnoseOptions:
    """The validated options ``argv`` describes; no checkpoint is loaded yet.

    A policy is ``oracle``, ``blind`` or a local model directory (with ``config.json``).

    Raises:
        UsageError: a bad value; the message names the flag.
        SystemExit: argparse's own errors (exit status 2, one stderr line) and ``--help``.
    """
    args = _parser().parse_args(list(argv))
    for flag, spec in (("--a", args.a), ("--b", args.b)):
        if spec not in BUILTIN:
            model_dir(flag, spec)
    desc = tuple(r.strip() for r in args.desc.split(","))
    if sum(len(r) for r in desc) > MAX_CELLS:
        raise UsageError("--desc", f"at most {MAX_CELLS} cells, got {sum(len(r) for r in desc)}")
    success_rate = number("--success-rate", args.success_rate, low=0.0, high=1.0)
    from budgetmix.training.envs.frozenlake_oracle import FrozenLakeModel

    with blame("--desc"):
        FrozenLakeModel(desc, True, success_rate)
    out = None if args.out is None else output_file("--out", args.out)
    return DiagnoseOptions(
        a=args.a,
        b=args.b,
        desc=desc,
        success_rate=success_rate,
        budgets=args.budgets,
        episodes=integer("--episodes", args.episodes, low=1),
        inject_at=integer("--inject-at", args.inject_at, low=1),
        out=out,
        samples=integer("--samples", args.samples, low=1),
    )


def diagnose_main(argv: Sequence[str]) -> int:
    """Run the diagnostics and print the tables; returns the exit code.

    2 after one stderr line naming the bad flag (a missing or damaged checkpoint included).
    """
    return run_command(PROG, lambda: _run(parse_diagnose_args(argv)))


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _action_table(args: DiagnoseOptions, cmp: ExpectedComparison) -> Table:
    """A's expected Q against B's on the non-tied states B reaches, with the noise floor."""
    from rich.table import Table

    table = Table(
        title=f"A={args.a} vs B={args.b}: same states ({cmp.points}; {cmp.non_tied} non-tied, "
        f"{cmp.n_after_mistake} of them right after a mistake), expected exact Q over "
        f"{cmp.samples} draws"
    )
    for col in ("", "A better", "tie", "B better", "noise floor"):
        table.add_column(col)
    floor = _pct(cmp.noise_floor)
    table.add_row("non-tied states", _pct(cmp.a_better), _pct(cmp.tie), _pct(cmp.b_better), floor)
    table.add_row(
        "after a mistake",
        _pct(cmp.a_better_after_mistake),
        _pct(cmp.tie_after_mistake),
        _pct(cmp.b_better_after_mistake),
        floor,
    )
    return table


def _sensitivity_table(sens: Mapping[str, SensitivityResult]) -> Table:
    """Per turns left at the start cell: each policy's P(flip action) and its optimal share."""
    from rich.table import Table

    first = next(iter(sens.values()))
    table = Table(
        title=f"Budget sensitivity at the start cell: P({first.flip_action!r}) by turns left "
        f"(optimal at {min(first.optimal_budgets)}-{max(first.optimal_budgets)})"
    )
    table.add_column("turns left")
    for name in sens:
        table.add_column(f"{name} P [95% CI]")
    for i, cell in enumerate(first.cells):
        row = [f"{cell.turns_left}{' (tied)' if cell.tied else ''}"]
        for r in sens.values():
            c, a = r.cells[i], r.flip_action
            row.append(
                f"{100 * c.probabilities[a]:.0f}% [{100 * c.low[a]:.0f}, {100 * c.high[a]:.0f}]"
            )
        table.add_row(*row)
    table.add_row(
        "sensitivity",
        *(f"{r.sensitivity:+.2f} [{r.low:+.2f}, {r.high:+.2f}] floor {r.noise_floor:.2f}"
          for r in sens.values()),
    )  # fmt: skip
    table.add_row("optimal share", *(_pct(r.share_optimal) for r in sens.values()))
    return table


def _curve_table(
    curves: Mapping[str, Sequence[CurvePoint]], budgets: Sequence[int], ceiling: int
) -> Table:
    """Success rate per budget for both policies; ``*`` marks budgets past the ceiling."""
    from rich.table import Table

    table = Table(title=f"Success vs budget (ceiling {ceiling}; extrapolation beyond it)")
    table.add_column("T")
    table.add_column("A")
    table.add_column("B")
    for i, t in enumerate(budgets):
        table.add_row(
            f"{t}{'*' if t > ceiling else ''}",
            *(
                f"{100 * c[i].rate:.1f}% [{100 * c[i].low:.0f}, {100 * c[i].high:.0f}]"
                for c in curves.values()
            ),
        )
    return table


def _recovery_table(recovery: Mapping[str, RecoveryResult], inject_at: int, budget: int) -> Table:
    """How often each policy still succeeds after a forced invalid reply."""
    from rich.table import Table

    table = Table(title=f"Recovery: invalid reply forced at turn {inject_at}, T={budget}")
    for col in ("policy", "recovered", "rate [95% CI]", "without injection"):
        table.add_column(col)
    for name, r in recovery.items():
        table.add_row(
            name,
            f"{r.recovered}/{r.injected}",
            f"{100 * r.rate:.0f}% [{100 * r.low:.0f}, {100 * r.high:.0f}]",
            f"{100 * r.baseline_rate:.0f}%",
        )
    return table


def _check_trained_env(args: DiagnoseOptions) -> None:
    """One stderr warning per checkpoint not known to be trained on this map and slip rate."""
    from budgetmix.training.data.provenance import env_differences, read_training_env
    from budgetmix.training.envs.frozenlake_compact import COMPACT_ENV_NAME

    here = {"desc": list(args.desc), "success_rate": args.success_rate}
    for flag, spec in (("--a", args.a), ("--b", args.b)):
        if spec in BUILTIN:
            continue
        trained = read_training_env(spec)
        if trained is None:
            why = "does not record the environment it was trained on (cannot check the map)"
        elif diff := env_differences(trained, COMPACT_ENV_NAME, here):
            why = f"was trained on another environment: {'; '.join(diff)}"
        else:
            continue
        print(f"{PROG}: warning: {flag} {spec} {why}", file=sys.stderr, flush=True)


def _measure(
    args: DiagnoseOptions,
    policies: Mapping[str, Any],
    model: Any,
    budgets: list[int],
    ceiling: int,
) -> dict[str, Any]:
    """Action quality, success curves and recovery of both policies (progress on stderr)."""
    from budgetmix.progress import ProgressLine
    from budgetmix.training.diagnostics.action_quality import compare_expected
    from budgetmix.training.diagnostics.episodes import (
        frozenlake_q,
        invalid_reply,
        run_episodes,
        success_curve,
    )
    from budgetmix.training.diagnostics.recovery_injection import recovery_injection
    from budgetmix.training.envs import env_tasks

    n = args.episodes
    # episodes: B's states at every budget, both curves, both recoveries (with and without)
    bar = ProgressLine("diagnose", 3 * n * len(budgets) + 4 * n, enabled=True, stream=sys.stderr)
    q = frozenlake_q(model)
    tasks = env_tasks(
        "frozenlake-compact",
        range(1_000_000, 1_000_000 + n),
        {"desc": args.desc, "success_rate": args.success_rate},
    )
    points = [
        p
        for t in budgets
        for tr in run_episodes(tasks, policies["B"], t, q=q, progress=bar)
        for p in tr.points
    ]
    cmp = compare_expected(points, policies["A"], policies["B"], q, samples=args.samples)
    curves = {
        name: success_curve(tasks, pol, budgets, progress=bar) for name, pol in policies.items()
    }
    budget = min(ceiling, max(budgets))
    inject_at = min(args.inject_at, budget)
    recovery = {
        name: recovery_injection(tasks, pol, budget, inject_at, invalid_reply(), q=q, progress=bar)
        for name, pol in policies.items()
    }
    bar.finish()
    sens = _sensitivity(policies, tasks, q, max(budgets))
    return {"cmp": cmp, "curves": curves, "recovery": recovery, "budget": budget, "sens": sens}


def _sensitivity(
    policies: Mapping[str, Any], tasks: Sequence[Any], q: Any, top: int
) -> dict[str, Any]:
    """Each policy's start-cell budget sensitivity (empty when the start is budget-blind)."""
    from budgetmix.exceptions import ConfigError
    from budgetmix.training.diagnostics.budget_sensitivity import budget_sensitivity
    from budgetmix.training.envs.frozenlake_compact import MOVE_LETTERS, parse_move

    try:
        return {
            name: budget_sensitivity(
                tasks, pol, range(2, max(top, 3) + 1), q, parse_move, moves=tuple(MOVE_LETTERS)
            )
            for name, pol in policies.items()
        }
    except ConfigError:  # no budget-dependent choice at the start of this map
        return {}


def _run(args: DiagnoseOptions) -> int:
    from budgetmix.training.envs.frozenlake_oracle import FrozenLakeModel, find_ceiling
    from rich.console import Console

    model = FrozenLakeModel(args.desc, True, args.success_rate)
    ceiling = find_ceiling(model)
    budgets = args.budgets or sorted(
        {max(1, round(f * ceiling)) for f in (0.25, 0.5, 0.75, 1.0, 1.5)}
    )
    policies = {"A": _policy("--a", args.a, model), "B": _policy("--b", args.b, model)}
    _check_trained_env(args)
    m = _measure(args, policies, model, budgets, ceiling)
    console = Console()
    if m["sens"]:
        console.print(_sensitivity_table(m["sens"]))
    console.print(_action_table(args, m["cmp"]))
    console.print(_curve_table(m["curves"], budgets, ceiling))
    console.print(_recovery_table(m["recovery"], args.inject_at, m["budget"]))
    if args.out is not None:
        numbers = {
            "a": args.a,
            "b": args.b,
            "ceiling": ceiling,
            "budgets": budgets,
            "action_quality": m["cmp"].to_dict(),
            "sensitivity": {k: v.to_dict() for k, v in m["sens"].items()},
            "curves": {k: [p.to_dict() for p in v] for k, v in m["curves"].items()},
            "recovery": {k: v.to_dict() for k, v in m["recovery"].items()},
        }
        with blame("--out", OSError):
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(numbers, indent=2))
    return 0
