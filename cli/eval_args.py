"""``budgetmix eval``'s flags: the parser, in three groups (the grid, the agent, the run)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from budgetmix.cli._errors import CliParser
from budgetmix.cli.tracing import add_trace_argument

__all__ = ["AGENTS", "EXECUTORS", "eval_parser"]

AGENTS = ("random", "oracle", "noisy", "local", "checkpoint", "openai")
EXECUTORS = ("thread", "process", "ray")


def eval_parser() -> argparse.ArgumentParser:
    """The parser of ``budgetmix eval``."""
    p = CliParser(
        prog="budgetmix eval",
        description="Evaluate an agent on a Pass@(K,T) grid: every task x budget T x K samples.",
    )
    _grid_arguments(p)
    _agent_arguments(p)
    _run_arguments(p)
    return p


def _grid_arguments(p: argparse.ArgumentParser) -> None:
    """What is evaluated: the config, the environment, tasks, budgets, samples, executors."""
    p.add_argument("--config", help="JSON or TOML file with any of the options below")
    p.add_argument(
        "--env",
        help="environment: a registered name (echo, faulty_tools, frozenlake, "
        "frozenlake-compact, humaneval), an entry point of budgetmix.environments, "
        "or module:Class",
    )
    p.add_argument("--env-kwargs", type=_json_mapping, help="environment arguments as JSON")
    p.add_argument("--seeds", type=_ints, help="task seeds, e.g. 0,1,2 (default: 0..tasks-1)")
    p.add_argument("--tasks", type=int, help="number of tasks when --seeds is not given")
    p.add_argument("--budgets", type=_ints, help="turn budgets T, e.g. 4,8,16")
    p.add_argument("-k", "--samples", type=int, help="K, attempts per (task, T)")
    p.add_argument("--concurrency", type=int, help="episodes in flight (default 8)")
    p.add_argument(
        "--workers", type=int, help="worker processes or Ray actors (above 1: a process pool)"
    )
    p.add_argument(
        "--executor",
        choices=EXECUTORS,
        help="thread (default), process (--workers N) or ray (budgetmix[ray]; RAY_ADDRESS joins)",
    )


def _agent_arguments(p: argparse.ArgumentParser) -> None:
    """Who plays: the agent, its model and its sampling."""
    p.add_argument("--agent", choices=AGENTS, help="which agent plays (default oracle)")
    p.add_argument("--noise", type=float, help="mistake rate of noisy / invalid rate of random")
    p.add_argument(
        "--blind",
        action="store_true",
        default=None,
        help="declare the agent budget-blind (no notice; prefix sharing)",
    )
    p.add_argument("--model", help="model directory (agents local and checkpoint)")
    p.add_argument("--base-url", help="OpenAI-compatible base URL (agent openai)")
    p.add_argument("--model-name", help="model name sent to the server (agent openai)")
    p.add_argument("--api-key-env", help="environment variable holding the API key")
    p.add_argument("--temperature", type=float, help="sampling temperature for model agents")
    p.add_argument("--max-new-tokens", type=int, help="generation cap per turn (agent local)")
    p.add_argument(
        "--batch-size",
        type=int,
        help="agent checkpoint: episodes in flight sampled in one forward pass (default 1; "
        "the same ids as 1)",
    )
    p.add_argument("--notice", help="notice format: v1, v1-compact, none (default: v1 or recorded)")


def _run_arguments(p: argparse.ArgumentParser) -> None:
    """How the run goes: seeds, policy, faults, output, plots, tracing."""
    p.add_argument("--seed", type=int, help="base seed (default 0)")
    p.add_argument(
        "--env-seed-mode", choices=("task", "sample"), help="env reset seed per task or per sample"
    )
    p.add_argument("--training-ceiling", type=int, help="label budgets above it extrapolated")
    p.add_argument("--fault-step", type=int, help="inject an environment failure at this step")
    p.add_argument(
        "--policy",
        type=_json_mapping,
        help="policy config as JSON (the demo's and training's format), e.g. "
        '\'{"early_stop": {"kind": "repeated_mistakes", "n": 3}}\'',
    )
    p.add_argument("--no-prefix-sharing", action="store_true", default=None)
    p.add_argument(
        "--on-error", choices=("raise", "record"), help="agent exceptions abort or count"
    )
    p.add_argument("--out", help="output directory (default runs/eval)")
    p.add_argument(
        "--overwrite", action="store_true", default=None, help="start the results afresh"
    )
    p.add_argument("--no-plots", action="store_true", default=None)
    p.add_argument("--no-progress", action="store_true", default=None)
    p.add_argument("--n-boot", type=int, help="bootstrap resamples for intervals (default 1000)")
    add_trace_argument(p, None)  # None: traced only when OTEL_TRACES_EXPORTER is set


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in str(text).replace(" ", "").split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None


def _json_mapping(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {type(value).__name__}")
    return value
