"""Rollouts through the local OpenAI-compatible server vs in-process rollouts (CPU).

    .venv/bin/python bench/server_rollouts.py [--repeats 5] [--episodes 16] [--out table.md]
    .venv/bin/python bench/server_rollouts.py --quick   (smoke run)

Setup: the tests' checkpoint of an ML team (a byte-level BPE trained locally,
Qwen2.5's chat template, a tiny Qwen2 saved with ``save_pretrained``), warmed up
by ``--sft-steps`` SFT steps on the tests' pick environment (call ``pick(n)``
until n is even, then reply) so episodes are multi-turn tool calls. One batch of
``--episodes`` episodes (groups of 4, a budget of ``--turns`` turns, at most
``--tokens`` sampled ids per reply) is rolled out by both paths on the same model:

* ``in-process``: :func:`~budgetmix.training.rollouts.rollout.run_rollouts` with the
  trainer's KV-cache :class:`~budgetmix.training.rollouts.generation.ModelGenerator`
  (every episode in one forward pass per token, caches kept across turns);
* ``server``: :class:`~budgetmix.training.serving.server_rollout.ServerRollouts`, each
  episode under a BudgetController through ``run_agent`` and ``openai.OpenAI``
  to :class:`~budgetmix.training.serving.openai_server.LocalOpenAIServer` on 127.0.0.1
  (HTTP + JSON, the server's chat-template rendering, concurrent requests batched,
  each conversation's KV kept across requests by the server's prefix cache;
  ``--no-prefix-cache``: every prompt re-read), ``--parallel`` episodes at once;
* ``server, re-read`` (``--reread``): a second server without its prefix cache, in
  the same alternation.

The paths alternate (in-process first on even repeats), ``--repeats`` times
each. The table shows, per path, the median seconds per batch with the spread
(min-max) as the noise, sampled tokens per second (the paths sample different
replies, so episodes differ in length), requests (model calls) per batch, and
the ratio of the medians (server / in-process) of seconds and of seconds per
sampled token, the share of prompt ids the server's prefix cache served, and the
machine's load average (1 minute) before and after.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "training"))  # the tests' checkpoint and environment

PATHS = ("in-process", "server")
#: With ``--reread``: a second server without its prefix cache, in the same run.
REREAD = "server, re-read"


def _trainer(tmp: Path, args: argparse.Namespace) -> Any:
    from _layout_fixtures import build_bpe_tokenizer, save_tiny_checkpoint
    from budgetmix.training import TrainConfig
    from budgetmix.training.trainer import Trainer

    save_tiny_checkpoint(
        "qwen", build_bpe_tokenizer("qwen"), tmp / "base", hidden=args.hidden, layers=args.layers
    )
    config = TrainConfig(
        model_path=str(tmp / "base"),
        env="_server_rollout_env:PickEnv",
        sft_steps=args.sft_steps,
        sft_batch=4,
        sft_lr=1e-2,
        steps=1,
        groups_per_step=max(1, args.episodes // 4),
        group_size=min(4, args.episodes),
        sampler={"kind": "fixed", "turns": args.turns},
        max_new_tokens=args.tokens,
        max_total_tokens=4096,
        output_dir=str(tmp / "run"),
        progress=False,
    )
    trainer = Trainer(config)
    trainer.run(stop_after=args.sft_steps)
    return trainer


def _in_process(trainer: Any, specs: list[Any]) -> tuple[list[Any], int]:
    from budgetmix.training.rollouts.generation import ModelGenerator
    from budgetmix.training.rollouts.rollout import run_rollouts

    gen = ModelGenerator(
        trainer.policy,
        eos_token_id=trainer.codec.eos_token_id,
        stop_token_ids=trainer.codec.stop_token_ids,
        pad_token_id=int(trainer.tokenizer.pad_token_id),
        temperature=1.0,
        generator=torch.Generator().manual_seed(0),
    )
    rows = run_rollouts(specs, gen, trainer.codec, trainer.settings)
    return rows, sum(r.num_turns for r in rows)


def _server(driver: Any, specs: list[Any]) -> tuple[list[Any], int]:
    rows = driver(specs)
    return rows, driver.report.requests


def run(args: argparse.Namespace) -> str:
    """Run the comparison; returns the markdown table."""
    from budgetmix.training.serving.openai_server import LocalOpenAIServer
    from budgetmix.training.serving.server_rollout import ServerRollouts

    torch.set_num_threads(args.threads)
    paths = (*PATHS, REREAD) if args.reread else PATHS
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        trainer = _trainer(Path(tmp), args)
        specs = trainer._rl_specs()
        times: dict[str, list[float]] = {p: [] for p in paths}
        tokens: dict[str, list[int]] = {p: [] for p in paths}
        calls: dict[str, list[int]] = {p: [] for p in paths}
        load = os.getloadavg()[0]
        servers = {
            path: stack.enter_context(
                LocalOpenAIServer(
                    trainer.policy,
                    trainer.tokenizer,
                    seed=0,
                    prefix_cache=path == "server" and not args.no_prefix_cache,
                    batch_window_s=args.batch_window,
                )
            )
            for path in paths[1:]
        }
        drivers = {
            path: ServerRollouts(
                server.base_url, "local", settings=trainer.settings, max_parallel=args.parallel
            )
            for path, server in servers.items()
        }
        random.seed(0)
        for rep in range(args.repeats):
            for path in paths if rep % 2 == 0 else paths[::-1]:
                t0 = time.perf_counter()
                if path in drivers:
                    rows, n = _server(drivers[path], specs)
                else:
                    rows, n = _in_process(trainer, specs)
                times[path].append(time.perf_counter() - t0)
                tokens[path].append(sum(r.sampled_tokens for r in rows))
                calls[path].append(n)
        for driver in drivers.values():
            driver.close()
        cache = servers["server"].cache
        fed = 0 if cache is None else cache.hits + cache.ids_fed
        hit = 0.0 if cache is None or not fed else cache.hits / fed
    notes = f"prefix cache served {hit:.0%} of the ids the server read; load {load:.2f} -> "
    return _table(args, paths, times, tokens, calls) + f"\n{notes}{os.getloadavg()[0]:.2f} (1 min)"


def _table(
    args: argparse.Namespace,
    paths: tuple[str, ...],
    times: dict[str, list[float]],
    tokens: dict[str, list[int]],
    calls: dict[str, list[int]],
) -> str:
    lines = [
        f"tiny Qwen2 (hidden {args.hidden}, {args.layers} layers), "
        f"{args.episodes} episodes, budget {args.turns} turns, <= {args.tokens} tokens per reply, "
        f"{args.repeats} repeats alternating, {args.threads} torch thread(s), "
        f"server: {args.parallel} episodes at once, batch window {args.batch_window * 1000:g} ms",
        "",
        "| path | s per batch (median, min-max) | sampled tokens/s (median) | model calls |",
        "|---|---|---|---|",
    ]
    per_token: dict[str, float] = {}
    for path in paths:
        t, k = times[path], tokens[path]
        rate = statistics.median(n / s for n, s in zip(k, t, strict=True))
        per_token[path] = statistics.median(s / max(n, 1) for n, s in zip(k, t, strict=True))
        lines.append(
            f"| {path} | {statistics.median(t):.3f} ({min(t):.3f}-{max(t):.3f}) | {rate:.0f} | "
            f"{statistics.median(calls[path]):.0f} |"
        )
    ratio = statistics.median(times["server"]) / statistics.median(times["in-process"])
    token_ratio = per_token["server"] / per_token["in-process"]
    lines += [
        "",
        f"server / in-process: {ratio:.2f}x the seconds per batch, "
        f"{token_ratio:.2f}x the seconds per sampled token",
    ]
    if REREAD in paths:
        reread = per_token[REREAD] / per_token["in-process"]
        lines.append(f"{REREAD} / in-process: {reread:.2f}x the seconds per sampled token")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Parse the arguments, run, print (and write) the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--sft-steps", type=int, default=60)
    parser.add_argument("--parallel", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=32, help="the tiny Qwen2's width")
    parser.add_argument("--layers", type=int, default=1, help="the tiny Qwen2's depth")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-prefix-cache", action="store_true", help="re-read every prompt")
    parser.add_argument("--reread", action="store_true", help="also a server without cache")
    parser.add_argument(
        "--batch-window", type=float, default=0.002, help="the server's batch_window_s"
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run (2 repeats, 4 episodes)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.episodes, args.sft_steps, args.parallel = 2, 4, 10, 4
    table = run(args)
    print(table)
    if args.out is not None:
        args.out.write_text(table + "\n")


if __name__ == "__main__":
    main()
