"""``budgetmix experiment --preset NAME``: any preregistered experiment, resumably, in its folder.

Examples::

    budgetmix experiment --preset default                 # runs/experiment/default
    budgetmix experiment --preset full-map2 --out runs/map2
    budgetmix experiment --preset tools --set seeds=2
    budgetmix experiment --preset confirm --error-rate 0.3   # issue 29's design, gated

Every preset of :data:`budgetmix.training.experiment.EXPERIMENT_PRESETS` runs:
the BudgetMix-vs-fixed pipeline (:func:`~budgetmix.training.experiment.run_experiment`:
SFT base, RL arms per seed, the Pass@(K,T) grid, diagnostics, ``report.md``,
``summary.json`` and plots), or, for the confirmatory designs (``confirm``,
``gpu``), :func:`~budgetmix.training.experiment.design.run_design` (the VoI gate
at the pilot's measured ``--error-rate``, bases seed by seed, ``summary.json``).
Rerunning the same command resumes: a finished base, RL run or evaluated unit in
the folder is reused, not trained again. Ctrl-C or SIGTERM ends with one line
naming the folder and the command that resumes.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from budgetmix._validate import parse_assignments
from budgetmix.cli._errors import (
    CliParser,
    UsageError,
    blame,
    number,
    output_dir,
    resume_command,
    run_command,
)
from budgetmix.exceptions import BudgetmixError

__all__ = ["DESIGN_PRESETS", "experiment_main"]

PROG = "budgetmix experiment"
#: Presets run as issue 29's gated confirmatory design (training.experiment.design).
DESIGN_PRESETS = ("confirm", "gpu")


def _parser() -> argparse.ArgumentParser:
    from budgetmix.training.experiment import EXPERIMENT_PRESETS

    p = CliParser(
        prog=PROG,
        description="Run a preregistered experiment (docs/experiment.md) into its own folder; "
        "the same command resumes an interrupted run. --preset default (the demo's stage 3) "
        "took about 6 min on two idle cores: SFT 131 s, its 12 RL runs in 2 worker "
        "processes 150 s, evaluation 22 s, diagnostics 63 s (measured 2026-12-04).",
    )
    p.add_argument("--preset", help=f"the design (required): {', '.join(EXPERIMENT_PRESETS)}")
    p.add_argument("--out", help="output folder (default runs/experiment/<preset>)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override an ExperimentConfig field; VALUE is JSON when it parses",
    )
    p.add_argument(
        "--error-rate",
        type=float,
        help=f"the pilot's measured error rate, for the gate of {' and '.join(DESIGN_PRESETS)}",
    )
    p.add_argument("--bases", type=int, default=2, help="SFT bases of a design (default 2)")
    p.add_argument(
        "--workers", type=int, default=None,
        help="processes for the RL runs (default: one per usable core; results do not change)",
    )  # fmt: skip
    p.add_argument("--no-progress", action="store_true", help="no stage and progress lines")
    return p


def _config(args: argparse.Namespace) -> Any:
    from budgetmix.training.experiment import EXPERIMENT_PRESETS, experiment_preset

    known = ", ".join(EXPERIMENT_PRESETS)
    if args.preset is None:
        raise UsageError("--preset", f"required, one of: {known}")
    if args.preset not in EXPERIMENT_PRESETS:
        raise UsageError("--preset", f"unknown experiment preset {args.preset!r}; known: {known}")
    with blame("--set"):
        return experiment_preset(args.preset, **parse_assignments("--set", args.set))


def _run(args: argparse.Namespace, config: Any, out: Path) -> int:
    progress = not args.no_progress
    if args.preset in DESIGN_PRESETS:
        from budgetmix.training.experiment.design import run_design

        if args.error_rate is None:
            raise UsageError("--error-rate", f"required for the design {args.preset!r}")
        rate = number("--error-rate", args.error_rate, low=0.0, high=1.0)
        if args.bases < 1:
            raise UsageError("--bases", f"must be an integer >= 1, got {args.bases}")
        run_design(config, out, error_rate=rate, bases=args.bases, progress=progress)
        files = {"summary": str(out / "summary.json"), "gate": str(out / "gate.json")}
    else:
        from budgetmix.training.experiment import run_experiment
        from budgetmix.training.experiment.arms import default_workers

        workers = default_workers(config) if args.workers is None else args.workers
        if workers < 1:
            raise UsageError("--workers", f"must be an integer >= 1, got {workers}")
        report = run_experiment(config, out, progress=progress, workers=workers)
        files = {k: str(v) for k, v in (report.files or {}).items()}
    print(json.dumps({"preset": args.preset, "out": str(out), "files": files}))
    return 0


def experiment_main(argv: Sequence[str] | None = None) -> int:
    """``budgetmix experiment``; returns the exit status (2 after one line naming a flag,
    130/143 after Ctrl-C/SIGTERM with one line naming the command that resumes)."""
    words = list(sys.argv[1:] if argv is None else argv)
    where: list[Path] = []

    def body() -> int:
        args = _parser().parse_args(words)
        config = _config(args)
        out = output_dir("--out", args.out or f"runs/experiment/{args.preset}")
        where.append(out)
        return _run(args, config, out)

    def account() -> str:
        if not where:
            return "nothing was written"
        again = resume_command(PROG, words)
        return f"what finished is kept in {str(where[0])!r}; resume with: {again}"

    return run_command(PROG, body, errors=(UsageError, BudgetmixError), on_interrupt=account)
