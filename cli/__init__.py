"""The ``budgetmix`` command line: demo, eval, report, train, init-model, diagnose, notice.

Every command lives in this package, the top layer: only it may import
training, evaluation, adapters and policies together (the import contract in
``pyproject.toml`` keeps the rest pointing one way). One module per command:
:mod:`~budgetmix.cli.demo` (with ``demo_agent``, ``demo_stages``, ``demo_train``),
:mod:`~budgetmix.cli.eval`, :mod:`~budgetmix.cli.report`,
:mod:`~budgetmix.cli.train`, :mod:`~budgetmix.cli.init_model`, :mod:`~budgetmix.cli.diagnose`,
:mod:`~budgetmix.cli.notice`; their shared flag checks are ``_errors``.

Each sub-command imports its machinery lazily so ``budgetmix --help`` stays fast
and works without the optional extras. Every command-line error is one stderr
line, ``budgetmix <command>: error: <flag>: <why>``, and exit status 2.
``python -m budgetmix.cli`` is the ``budgetmix`` script (and the entry of
``accelerate launch -m budgetmix.cli train ...``).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

from budgetmix._version import __version__
from budgetmix.cli._errors import CliParser

__all__ = ["main"]

# sub-command -> (module, function, help). Functions take argv and return an exit code.
_COMMANDS: dict[str, tuple[str, str, str]] = {
    "demo": ("budgetmix.cli.demo", "demo_main", "run the main job on embedded defaults"),
    "eval": ("budgetmix.cli.eval", "eval_main", "evaluate an agent on a Pass@(K,T) grid"),
    "eval-merge": (
        "budgetmix.cli.eval_merge",
        "eval_merge_main",
        "merge the results shards of one evaluation run",
    ),
    "report": (
        "budgetmix.cli.report",
        "report_main",
        "rebuild or compare evaluation reports",
    ),
    "train": ("budgetmix.cli.train", "train_main", "fine-tune a local model with BudgetMix RL"),
    "experiment": (
        "budgetmix.cli.experiment",
        "experiment_main",
        "run a preregistered experiment preset, resumably",
    ),
    "init-model": (
        "budgetmix.cli.init_model",
        "init_model_main",
        "make a base model to train from, from a local tokenizer",
    ),
    "diagnose": (
        "budgetmix.cli.diagnose",
        "diagnose_main",
        "compare two policies step by step (exact Q), budget curves, recovery",
    ),
    "notice": ("budgetmix.cli.notice", "notice_main", "print the budget notice for a state"),
    "voi": ("budgetmix.cli.voi", "voi_main", "the exact value of knowing the budget, per budget"),
    "gateway": ("budgetmix.cli.gateway", "gateway_main", "run the budget proxy for any client"),
}


def _build_parser() -> argparse.ArgumentParser:
    parser = CliParser(
        prog="budgetmix",
        description="Turn budgets for tool-using LLM agents: enforce, notify, trace, "
        "evaluate Pass@(K,T), train with BudgetMix RL.",
    )
    parser.add_argument("--version", action="version", version=f"budgetmix {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, _, help_text) in _COMMANDS.items():
        # each command parses its own options; `budgetmix CMD --help` shows them
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def _resolve(command: str) -> Callable[[list[str]], int]:
    module_name, func_name, _ = _COMMANDS[command]
    module = importlib.import_module(module_name)
    func: Callable[[list[str]], int] = getattr(module, func_name)
    return func


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``budgetmix`` script; returns the exit status (2 on a bad flag).

    argparse's own errors and ``--help`` end in ``SystemExit`` (status 2 and 0).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    parser = _build_parser()
    if not args or args[0] not in _COMMANDS:
        parser.parse_args(args or ["--help"])
        parser.error(f"a command is required: {', '.join(_COMMANDS)}")
    return _resolve(args[0])(args[1:])
