"""Batched checkpoint evaluation vs batch 1: sampled tokens per second under the Evaluator (CPU).

    .venv/bin/python bench/batched_eval.py [--repeats 5] [--concurrency 8] [--out table.md]
    .venv/bin/python bench/batched_eval.py --quick   (smoke run)

Setup: a tiny llama (``--hidden`` wide, ``--layers`` deep, the tests' char tokenizer,
seeded weights) served by :class:`~budgetmix.training.serving.serve.TrainedPolicyAgent` on a
Pass@(K,T) grid of non-slippery FrozenLake tasks (4x4 and 8x8 maps, ``--tasks`` tasks,
budgets 4 and 8, K = 2, notices ``v1-compact``, at most ``--tokens`` sampled ids per turn,
sampled at temperature 1) by the real :class:`~budgetmix.evaluation.Evaluator` with
``--concurrency`` episodes in flight, through two agent factories on the same model:

* ``batch 1``: ``TrainedPolicyAgent.factory(batch_size=1)``, each episode sampled in its
  own forward passes (``budgetmix eval --agent checkpoint``'s default);
* ``batched``: ``TrainedPolicyAgent.factory(batch_size=concurrency)``, the concurrent
  episodes' turns sampled together (:mod:`budgetmix.training.serving.serve_batch`; ``--batch-size
  N``): each turn's long new ids prefilled in its episode's thread, the decoding batched.

Both with ``episode_seeds=True``, as the CLI: each episode samples its cell's stream.

The two alternate (batch 1 first on even repeats), ``--repeats`` times each. The table
shows, per path, the median seconds per grid with the spread (min-max), sampled tokens
per second and per CPU second of the process (medians of the repeats: both paths run the
prefills in ``concurrency`` threads at once; batch 1 its decoding too, the batched path in
one thread, so on a machine shared with other jobs wall time also measures the share of
the cores each gets), the mean batch size, and the ratios (batched / batch 1); below it,
whether both paths sampled the same ids (they must: every episode draws from its own
stream) and the machine's load average (1 minute) before and after.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import tempfile
import time
import weakref
from pathlib import Path
from typing import Any

import torch

PATHS = ("batch 1", "batched")


def _model(args: argparse.Namespace) -> tuple[Any, Any]:
    from budgetmix.training.data.models import TinyModelSpec, build_tiny_model
    from budgetmix.training.rollouts.tokenizer import build_char_tokenizer

    tokenizer = build_char_tokenizer()
    spec = TinyModelSpec(
        hidden_size=args.hidden,
        num_layers=args.layers,
        num_heads=max(2, args.hidden // 32),
        num_kv_heads=max(1, args.hidden // 64),
        intermediate_size=2 * args.hidden,
    )
    return build_tiny_model(spec, tokenizer, seed=0), tokenizer


def _tasks(n: int) -> list[Any]:
    from budgetmix.environment import Task
    from budgetmix.training.envs import FrozenLakeEnv

    lake = functools.partial(FrozenLakeEnv, slippery=False)
    return [
        Task(
            task_id=f"lake-{i}",
            seed=i,
            make_env=functools.partial(lake, map_name=("4x4", "8x8")[i % 2]),
        )
        for i in range(n)
    ]


def _grid(model: Any, tokenizer: Any, args: argparse.Namespace, batch: int, out: Path) -> Any:
    """One grid: (seconds, CPU seconds, sampled ids, every episode's ids, batch sizes)."""
    from budgetmix.evaluation import EvalConfig, Evaluator
    from budgetmix.training.serving.serve import TrainedPolicyAgent

    sampled: list[int] = []
    episodes: dict[tuple[int, int | None], tuple[int, ...]] = {}

    class Counting(TrainedPolicyAgent):
        def __init__(self, *args: Any, **options: Any) -> None:
            super().__init__(*args, **options)
            # a weak reference: a cycle would keep the agent (and its turn) alive after its episode
            inner = weakref.WeakMethod(self.generator.generate_ids)

            def counted(contexts: Any, n: int, keys: Any = None) -> Any:
                out = inner()(contexts, n, keys)  # type: ignore[misc]
                sampled.append(sum(len(g.ids) for g in out))
                return out

            self.generator.generate_ids = counted  # type: ignore[method-assign]

        def start(self, env: Any, seed: int) -> None:
            super().start(env, seed)  # episode_seeds: the stream is the cell's own
            self._seed = seed

        def act(self, observation: str, notice: str | None, left: int | None) -> Any:
            action = super().act(observation, notice, left)
            episodes[(self._seed, left)] = tuple(self._ids or [])
            return action

    make = Counting.factory(
        model,
        tokenizer,
        batch_size=batch,
        temperature=1.0,
        max_new_tokens=args.tokens,
        episode_seeds=True,
    )
    config = EvalConfig(
        budgets=(4, 8),
        samples=2,
        concurrency=args.concurrency,
        notice_format="v1-compact",
        prefix_sharing=False,
    )
    evaluator = Evaluator(make, _tasks(args.tasks), config)
    t0, c0 = time.perf_counter(), time.process_time()
    evaluator.run(out, overwrite=True)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    batcher = getattr(make().generator, "batcher", None)
    sizes = list(batcher.batches) if batcher is not None else [1] * len(sampled)
    return seconds, cpu, sum(sampled), episodes, sizes


def run(args: argparse.Namespace) -> str:
    """Run the comparison; returns the markdown table."""
    torch.set_num_threads(args.threads)
    model, tokenizer = _model(args)
    times: dict[str, list[float]] = {p: [] for p in PATHS}
    cpus: dict[str, list[float]] = {p: [] for p in PATHS}
    tokens: dict[str, list[int]] = {p: [] for p in PATHS}
    batches: dict[str, list[float]] = {p: [] for p in PATHS}
    ids: dict[str, Any] = {}
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeats):
            for path in PATHS if rep % 2 == 0 else PATHS[::-1]:
                size = 1 if path == "batch 1" else args.concurrency
                s, c, n, episodes, sizes = _grid(
                    model, tokenizer, args, size, Path(tmp) / "r.jsonl"
                )
                times[path].append(s)
                cpus[path].append(c)
                tokens[path].append(n)
                batches[path].append(statistics.mean(sizes))
                ids.setdefault(path, episodes)
    same = ids["batch 1"] == ids["batched"]
    notes = f"same ids on both paths: {'yes' if same else 'NO'}; load {load:.2f} -> "
    return _table(args, times, cpus, tokens, batches) + f"\n{notes}{os.getloadavg()[0]:.2f} (1 min)"


def _table(
    args: argparse.Namespace,
    times: dict[str, list[float]],
    cpus: dict[str, list[float]],
    tokens: dict[str, list[int]],
    batches: dict[str, list[float]],
) -> str:
    params = args.hidden, args.layers
    lines = [
        f"tiny llama (hidden {params[0]}, {params[1]} layers), {args.tasks} tasks x budgets 4, 8 "
        f"x K=2, <= {args.tokens} tokens per turn, {args.concurrency} episodes in flight, "
        f"{args.repeats} repeats alternating, {args.threads} torch thread(s)",
        "",
        "| path | s per grid (median, min-max) | sampled tokens/s (median) "
        "| tokens per CPU s (median) | mean batch |",
        "|---|---|---|---|---|",
    ]
    rate: dict[str, float] = {}
    per_cpu: dict[str, float] = {}
    for path in PATHS:
        t, c, k = times[path], cpus[path], tokens[path]
        rate[path] = statistics.median(n / s for n, s in zip(k, t, strict=True))
        per_cpu[path] = statistics.median(n / s for n, s in zip(k, c, strict=True))
        lines.append(
            f"| {path} | {statistics.median(t):.2f} ({min(t):.2f}-{max(t):.2f}) | "
            f"{rate[path]:.0f} | {per_cpu[path]:.0f} | {statistics.mean(batches[path]):.2f} |"
        )
    lines += [
        "",
        f"batched / batch 1: {rate['batched'] / rate['batch 1']:.2f}x the tokens/s, "
        f"{per_cpu['batched'] / per_cpu['batch 1']:.2f}x the tokens per CPU second",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Parse the arguments, run, print (and write) the table."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="a smoke run (2 repeats, 2 tasks)")
    parser.add_argument("--out", help="also write the table to this file")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.tasks, args.concurrency, args.tokens = 2, 2, 4, 4
    table = run(args)
    print(table)
    if args.out:
        Path(args.out).write_text(table + "\n")


if __name__ == "__main__":
    sys.exit(main())
