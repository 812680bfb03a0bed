"""``main(argv)``: the training command line (``budgetmix train``, ``-m budgetmix.training``).

Examples::

    budgetmix train --preset echo-tiny
    budgetmix train --config run.toml --set steps=50 --set group_budgets='"mixed"'
    budgetmix train --preset frozenlake-tiny --output-dir runs/fl --resume
    accelerate launch --num_processes 2 -m budgetmix.training --preset echo-tiny
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from budgetmix.exceptions import BudgetmixError, ConfigError
from budgetmix.training.config import PRESETS, TrainConfig, load_config, preset

__all__ = ["build_parser", "config_from_args", "main", "train_main"]


def build_parser(prog: str = "budgetmix train") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description="Train a local model with BudgetMix RL."
    )
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--config", help="a .json or .toml TrainConfig file")
    src.add_argument("--preset", help=f"a named preset: {', '.join(sorted(PRESETS))}")
    parser.add_argument("--output-dir", help="where checkpoints, metrics.jsonl and final/ go")
    parser.add_argument(
        "--resume", action="store_true", help="continue from <output-dir>/checkpoint"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a field; VALUE is JSON when it parses, else a string",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def _parse_override(item: str) -> tuple[str, Any]:
    if "=" not in item:
        raise ConfigError(f"--set expects FIELD=VALUE, got {item!r}")
    key, raw = item.split("=", 1)
    try:
        return key.strip(), json.loads(raw)
    except json.JSONDecodeError:
        return key.strip(), raw


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The config the parsed arguments describe.

    Raises:
        ConfigError: bad file, preset, or override.
    """
    overrides = dict(_parse_override(s) for s in args.set)
    if args.output_dir:
        overrides["output_dir"] = args.output_dir
    if args.no_progress:
        overrides["progress"] = False
    if args.config:
        return load_config(args.config).with_overrides(**overrides)
    if args.preset:
        return preset(args.preset, **overrides)
    return TrainConfig.from_dict(overrides)


def main(argv: Sequence[str] | None = None) -> int:
    """Run training from command-line arguments; returns the exit status (2 on a bad config)."""
    args = build_parser().parse_args(argv)
    try:
        config = config_from_args(args)
        from budgetmix.training.trainer import train

        result = train(config, resume=args.resume)
    except BudgetmixError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    last = result.metrics[-1] if result.metrics else {}
    print(
        json.dumps(
            {
                "output_dir": str(result.output_dir),
                "steps": result.steps_done,
                "final_model": str(result.final_model_dir) if result.final_model_dir else None,
                "last": {k: last[k] for k in ("reward", "success", "sft_loss") if k in last},
                "evaluation": result.evaluation.get("per_budget", {}),
            }
        )
    )
    return 0


def train_main(argv: Sequence[str] | None = None) -> int:
    """The ``budgetmix train`` sub-command (same as :func:`main`)."""
    return main(argv)
