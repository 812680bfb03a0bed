"""``budgetmix init-model``: a user's first base model, from a local tokenizer and a shape.

Examples::

    budgetmix init-model --tokenizer tokenizer --output-dir base
    budgetmix init-model --tokenizer tokenizer --output-dir base --arch llama --hidden-size 128
    budgetmix init-model --tokenizer tokenizer --output-dir base --config shape.toml

The tokenizer is any local Hugging Face tokenizer directory with a chat template
(or give one with ``--chat-template``); nothing is downloaded. The model is a
randomly initialised causal LM (:class:`~budgetmix.training.data.models.TinyModelSpec`,
seeded) saved with ``save_pretrained`` next to the tokenizer, so that
``budgetmix train --set model_path='"base"'`` (or ``TrainConfig.model_path``)
starts from it. An output folder that already holds a model is refused unless
``--overwrite`` is given.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from budgetmix.cli._errors import (
    CliParser,
    UsageError,
    blame,
    output_dir,
    readable_file,
    run_command,
)

__all__ = ["build_parser", "init_model_main"]

PROG = "budgetmix init-model"
#: TinyModelSpec field -> flag.
_SHAPE_FLAGS = {
    "arch": "--arch",
    "hidden_size": "--hidden-size",
    "num_layers": "--layers",
    "num_heads": "--heads",
    "num_kv_heads": "--kv-heads",
    "intermediate_size": "--intermediate-size",
    "max_positions": "--max-positions",
}


def build_parser() -> argparse.ArgumentParser:
    """The ``budgetmix init-model`` parser (errors: one stderr line, exit status 2)."""
    p = CliParser(
        prog=PROG,
        description="Make a base model to train from: a randomly initialised causal LM "
        "for a local tokenizer (the default shape: 3.9 s wall, 4 CPU s on two idle cores, "
        "measured 2026-12-02; nothing is downloaded).",
    )
    p.add_argument("--tokenizer", required=True, help="a local tokenizer directory")
    p.add_argument("--output-dir", required=True, help="where the model directory is written")
    p.add_argument("--config", help="a .json or .toml file of the shape's fields (as below)")
    p.add_argument("--arch", choices=("llama", "qwen2"), help="architecture (default llama)")
    for field, flag in list(_SHAPE_FLAGS.items())[1:]:
        p.add_argument(flag, type=int, dest=field, help=f"TinyModelSpec.{field}")
    p.add_argument("--chat-template", help="a Jinja chat template file (else the tokenizer's)")
    p.add_argument("--seed", type=int, default=0, help="initialisation seed (default 0)")
    p.add_argument("--overwrite", action="store_true", help="replace a model already there")
    return p


def _shape(args: argparse.Namespace) -> Any:
    """The :class:`TinyModelSpec` of ``--config`` and the shape flags (flags win)."""
    from budgetmix.training.data.models import TinyModelSpec

    values: dict[str, Any] = {}
    if args.config is not None:
        from budgetmix.cli.eval import load_config

        with blame("--config"):
            values = load_config(readable_file("--config", args.config))
        unknown = sorted(set(values) - {f.name for f in fields(TinyModelSpec)})
        if unknown:
            raise UsageError("--config", f"unknown keys {unknown}")
    values.update({k: getattr(args, k) for k in _SHAPE_FLAGS if getattr(args, k) is not None})
    try:
        return TinyModelSpec(**values)
    except ValueError as exc:  # ConfigError names the field: blame its flag
        field = next((k for k in _SHAPE_FLAGS if f"TinyModelSpec.{k}" in str(exc)), None)
        given = field is not None and getattr(args, field) is not None
        flag = _SHAPE_FLAGS[field] if field is not None and given else "--config"
        raise UsageError(flag, str(exc)) from None


def _tokenizer(args: argparse.Namespace) -> Any:
    from budgetmix._deps import require

    require("transformers", "train")
    from transformers import AutoTokenizer

    path = Path(args.tokenizer)
    if not path.is_dir():
        raise UsageError("--tokenizer", f"{str(path)!r} is not a local tokenizer directory")
    with blame("--tokenizer", OSError, ValueError, TypeError):
        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    if args.chat_template is not None:
        tokenizer.chat_template = readable_file("--chat-template", args.chat_template).read_text()
    if not tokenizer.chat_template:
        raise UsageError("--tokenizer", f"{str(path)!r} has no chat template; give --chat-template")
    if tokenizer.eos_token_id is None:
        raise UsageError("--tokenizer", f"{str(path)!r} has no EOS token")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _init(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(argv)
    out = output_dir("--output-dir", args.output_dir)
    if (out / "config.json").exists() and not args.overwrite:
        raise UsageError(
            "--output-dir", f"{str(out)!r} already holds a model; pass --overwrite to replace it"
        )
    spec = _shape(args)
    tokenizer = _tokenizer(args)
    from budgetmix.training.data.models import build_tiny_model

    model = build_tiny_model(spec, tokenizer, seed=args.seed)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    params = sum(p.numel() for p in model.parameters())
    print(json.dumps({"output_dir": str(out), "parameters": params, **asdict(spec)}))
    return 0


def init_model_main(argv: Sequence[str] | None = None) -> int:
    """``budgetmix init-model``; returns the exit status (2 after one line naming a flag)."""
    return run_command(PROG, lambda: _init(list(sys.argv[1:] if argv is None else argv)))
