"""``main(argv)``: the training command line (``budgetmix train``).

Examples::

    budgetmix train --preset echo-tiny
    budgetmix train --config run.toml --set steps=50 --set group_budgets='"mixed"'
    budgetmix train --preset frozenlake-tiny --output-dir runs/fl --resume
    budgetmix train --preset frozenlake-tiny --output-dir runs/fl --overwrite

A fresh run into a folder that holds a run (``metrics.jsonl``, a checkpoint or
``final/``) is refused, naming ``--resume`` and ``--overwrite``; Ctrl-C or SIGTERM
ends with one line naming the last checkpoint and the command that resumes.
    budgetmix train --env mypkg.envs:MyEnv --sft-data episodes.jsonl --set steps=10
    accelerate launch --multi_gpu --num_processes 2 -m budgetmix.cli train --preset echo-tiny
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from budgetmix._validate import parse_assignments
from budgetmix.cli._errors import (
    CliParser,
    UsageError,
    blame,
    json_object,
    model_dir,
    one_line,
    output_dir,
    readable_file,
    resume_command,
    run_command,
)
from budgetmix.exceptions import BudgetmixError
from budgetmix.training.config import PRESETS, TrainConfig, load_config, preset

__all__ = ["build_parser", "config_from_args", "main", "parse_train_args", "train_main"]


PROG = "budgetmix train"


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The ``budgetmix train`` argument parser (errors: one stderr line, exit status 2)."""
    parser = CliParser(prog=prog, description="Train a local model with BudgetMix RL.")
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--config", help="a .json or .toml TrainConfig file")
    src.add_argument("--preset", help=f"a named preset: {', '.join(sorted(PRESETS))}")
    parser.add_argument("--output-dir", help="where checkpoints, metrics.jsonl and final/ go")
    start = parser.add_mutually_exclusive_group()
    start.add_argument(
        "--resume", action="store_true", help="continue from <output-dir>/checkpoint"
    )
    start.add_argument(
        "--overwrite",
        action="store_true",
        help="start afresh in an output folder that holds a run (its metrics, "
        "checkpoint and final model are deleted); without it such a folder is refused",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a field; VALUE is JSON when it parses, else a string",
    )
    parser.add_argument(
        "--env",
        help="the environment: a registered name, an entry point of budgetmix.environments, "
        "or module:Class (a class or factory; sets TrainConfig.env)",
    )
    parser.add_argument("--env-kwargs", help="the environment's arguments as a JSON object")
    parser.add_argument(
        "--sft-data", help="recorded episodes (JSONL) to learn from in the SFT steps"
    )
    parser.add_argument(
        "--chat-template",
        help="a Jinja chat template file to train with instead of the tokenizer's own "
        "(a prefix-stable training variant); the trained checkpoint keeps it",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def _base_config(args: argparse.Namespace) -> TrainConfig:
    if args.config:
        with blame("--config"):
            return load_config(args.config)
    if args.preset:
        with blame("--preset"):
            return preset(args.preset)
    return TrainConfig()


def _check_env(config: TrainConfig) -> None:
    """Build one task and its environment, so bad ``env_kwargs`` fail before training."""
    from budgetmix.training.envs import env_spec

    tasks = env_spec(config.env).make_tasks([0], dict(config.env_kwargs))
    tasks[0].make_env()


def _flag_overrides(args: argparse.Namespace) -> dict[str, tuple[str, Any]]:
    """``{field: (flag, value)}`` of the flags that set a config field."""
    found: dict[str, tuple[str, Any]] = {}
    if args.env is not None:
        found["env"] = ("--env", args.env)
    if args.env_kwargs is not None:
        found["env_kwargs"] = ("--env-kwargs", json_object("--env-kwargs", args.env_kwargs))
    if args.sft_data is not None:
        found["sft_data"] = ("--sft-data", str(readable_file("--sft-data", args.sft_data)))
    if args.chat_template is not None:
        path = readable_file("--chat-template", args.chat_template)
        found["chat_template"] = ("--chat-template", str(path))
    return found


def _env_blame(overrides: dict[str, Any], flags: dict[str, tuple[str, Any]], source: str) -> str:
    if "env_kwargs" in flags:
        return "--env-kwargs"
    if "env" in flags:
        return "--env"
    return "--set" if {"env", "env_kwargs"} & set(overrides) else source


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The validated config the parsed arguments describe.

    Each value is checked against the flag it came from: the file (``--config``),
    the preset (``--preset``), the overrides (``--set``), ``--env``,
    ``--env-kwargs``, ``--sft-data``, ``--chat-template``, ``--output-dir``; a local
    ``model_path`` must be a model directory (never looked up on a model hub).

    Raises:
        UsageError: bad file, preset, override or path; the message names the flag.
    """
    with blame("--set"):
        overrides = parse_assignments("--set", args.set)
    if "env_kwargs" in overrides and not isinstance(overrides["env_kwargs"], dict):
        got = type(overrides["env_kwargs"]).__name__
        raise UsageError("--set", f"env_kwargs must be a JSON object, got {got}")
    config = _base_config(args)
    with blame("--set"):
        config = config.with_overrides(**overrides) if overrides else config
    flags = _flag_overrides(args)
    if flags:
        culprit = "--env" if "env" in flags else next(iter(flags.values()))[0]
        with blame(culprit):
            config = config.with_overrides(**{k: v for k, (_, v) in flags.items()})
    if args.output_dir is not None:
        output_dir("--output-dir", args.output_dir)
        with blame("--output-dir"):
            config = config.with_overrides(output_dir=args.output_dir)
    if args.no_progress:
        config = replace(config, progress=False)
    source = "--config" if args.config else "--preset"
    if config.model_path is not None:
        model_dir("--set" if "model_path" in overrides else source, config.model_path)
    with blame(_env_blame(overrides, flags, source)):
        _check_env(config)
    from_set = "output_dir" in overrides and args.output_dir is None
    output_dir("--set" if from_set else "--output-dir", config.output_dir)
    return config


def parse_train_args(argv: Sequence[str] | None = None) -> tuple[TrainConfig, bool]:
    """``(config, resume)`` from ``argv``; nothing is trained or written.

    Raises:
        UsageError: as :func:`config_from_args`.
        SystemExit: argparse's own errors (exit status 2, one stderr line) and ``--help``.
    """
    args = build_parser().parse_args(argv)
    return config_from_args(args), bool(args.resume)


#: What a run leaves in its output folder (checkpoint copies of an interrupted save too).
RUN_FILES = ("metrics.jsonl", "checkpoint", "checkpoint.tmp", "checkpoint.old", "final")


def _run_files(out: Path) -> list[str]:
    return [name for name in RUN_FILES if (out / name).exists()]


def _check_fresh(out: Path, overwrite: bool) -> None:
    """Refuse a fresh run into a folder holding a run, or (``--overwrite``) clear it."""
    found = _run_files(out)
    if not found:
        return
    if not overwrite:
        raise UsageError(
            "--output-dir",
            f"{str(out)!r} already holds a run ({', '.join(found)}); pass --resume to "
            "continue it or --overwrite to delete it and start afresh",
        )
    for name in found:
        path = out / name
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)  # another rank may clear it too
        else:
            path.unlink(missing_ok=True)
    (out / "fingerprint.json").unlink(missing_ok=True)


def checkpoint_step(out: Path) -> int | None:
    """The step of the checkpoint a ``--resume`` in ``out`` continues from, if any."""
    from budgetmix.training.data.checkpoint import latest_checkpoint

    found = latest_checkpoint(out)
    if found is None:
        return None
    try:
        step = json.loads((found / "state.json").read_text())["step"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return step if isinstance(step, int) else None


def _interrupt_account(out: Path, argv: Sequence[str]) -> str:
    """What an interrupted run saved and the command that continues it."""
    step = checkpoint_step(out)
    again = resume_command(PROG, [a for a in argv if a != "--overwrite"], "--resume")
    if step is None:
        fresh = resume_command(PROG, [a for a in argv if a != "--resume"], "--overwrite")
        return f"no checkpoint saved yet in {str(out)!r}; start again with: {fresh}"
    return f"checkpoint at step {step} saved in {str(out)!r}; resume with: {again}"


def _train(config: TrainConfig, resume: bool) -> int:
    from budgetmix.training.engines.distributed import prepare_launch
    from budgetmix.training.trainer import train

    if resume and (step := checkpoint_step(Path(config.output_dir))) is not None:
        print(f"resuming from step {step} in {config.output_dir!r}", file=sys.stderr, flush=True)
    try:
        prepare_launch()  # before the first Accelerator: N CPU ranks join one gloo group
        result = train(config, resume=resume)
    except BudgetmixError as exc:
        why = str(exc)
        if resume and why.startswith("resume: "):  # the trainer's refusals of --resume
            why = "--" + why
        print(f"{PROG}: error: {one_line(why)}", file=sys.stderr)
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


def main(argv: Sequence[str] | None = None) -> int:
    """Run training from command-line arguments; returns the exit status.

    2 on a bad flag (one stderr line naming it) or a run that stops on a budgetmix
    error; argparse's own errors and ``--help`` end in ``SystemExit``.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    where: list[Path] = []

    def body() -> int:
        parsed = build_parser().parse_args(args)
        config = config_from_args(parsed)
        where.append(Path(config.output_dir))
        if not parsed.resume:
            _check_fresh(Path(config.output_dir), parsed.overwrite)
        return _train(config, bool(parsed.resume))

    def account() -> str:
        if not where:
            return "nothing was written"
        return _interrupt_account(where[0], args)

    return run_command(PROG, body, on_interrupt=account)


def train_main(argv: Sequence[str] | None = None) -> int:
    """The ``budgetmix train`` sub-command (same as :func:`main`)."""
    return main(argv)
