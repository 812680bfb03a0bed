"""Rollout cost vs number of turns: KV cache kept across turns vs the whole context re-read.

    .venv/bin/python bench/rollout_kv.py [--repeats 3] [--timer wall|cpu] [--out table.md]
    .venv/bin/python bench/rollout_kv.py --quick --out table.md   (smoke run, CI)

Setup: a tiny-but-not-trivial Qwen2 built from a transformers config (hidden
256, 4 layers, 8 heads / 2 KV heads, MLP 768, the char tokenizer's 102 ids;
random weights: the cost does not depend on what the model says) rolls out a
batch of ``--episodes`` episodes for 8, 16, 32 and 64 turns. Each turn is what
``run_rollouts`` does for a batch: one ``ModelGenerator.generate_ids`` call for
every episode, exactly ``--tokens`` sampled ids per response (no id can stop
it: the only stop id is outside the vocabulary), then an environment reply of
``--reply`` ids appended to every context. The prompt is ``--prompt`` ids.

* ``cached``: each request carries its episode key, so the generator feeds only
  the ids its cache has not seen (the last sampled id and the reply);
* ``re-read``: no key, every turn re-reads the whole context (the path before
  issue 17).

``--timer cpu`` measures the process's CPU time instead of wall time (steadier
on a machine shared with other work; with one torch thread it is the work done).
The two paths run alternately on the same model and batch, ``--repeats`` times
each; the table shows medians and, as the noise, the spread (min-max). The
cost exponent is the least-squares slope of log(median seconds) on log(turns)
over 8..64 turns (1 = linear, 2 = quadratic); the last line is the 64-turn
ratio re-read / cached, and how many context ids each path ran through the
model per sampled id. Attention over the context is the part that must grow with
it: the time inside ``scaled_dot_product_attention`` (the attention kernel of every
layer) is clocked in the same runs, and the last lines give its share at the last
turn count and the exponent of the rest (the time outside the kernel).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from pathlib import Path
from typing import Any

import torch
from budgetmix.training.data.models import TinyModelSpec, build_tiny_model
from budgetmix.training.rollouts.generation import ModelGenerator
from budgetmix.training.rollouts.tokenizer import build_char_tokenizer

PATHS = ("cached", "re-read")


def _model(quick: bool) -> tuple[Any, int]:
    tokenizer = build_char_tokenizer()
    spec = (
        TinyModelSpec(arch="qwen2")
        if quick
        else TinyModelSpec(
            arch="qwen2",
            hidden_size=256,
            num_layers=4,
            num_heads=8,
            num_kv_heads=2,
            intermediate_size=768,
            max_positions=4096,
        )
    )
    return build_tiny_model(spec, tokenizer, seed=0).eval(), len(tokenizer)


class _KernelClock:
    """Seconds spent inside ``torch.nn.functional.scaled_dot_product_attention`` (which
    transformers' sdpa and budgetmix's grouped attention look up at every call)."""

    def __init__(self, clock: Any) -> None:
        self.clock, self.seconds = clock, 0.0
        self.kernel = torch.nn.functional.scaled_dot_product_attention

    def __enter__(self) -> _KernelClock:
        def timed(*a: Any, **kw: Any) -> Any:
            start = self.clock()
            try:
                return self.kernel(*a, **kw)
            finally:
                self.seconds += self.clock() - start

        torch.nn.functional.scaled_dot_product_attention = timed
        return self

    def __exit__(self, *exc: object) -> None:
        torch.nn.functional.scaled_dot_product_attention = self.kernel


def _rollout(model: Any, vocab: int, args: argparse.Namespace, turns: int, cached: bool) -> Any:
    """One batch rolled out for ``turns`` turns; returns (seconds, ids fed, ids sampled,
    seconds inside the attention kernel)."""
    gen = ModelGenerator(
        model,
        pad_token_id=0,
        stop_token_ids=[vocab],  # outside the vocabulary: every response has --tokens ids
        temperature=1.0,
        batch_size=args.episodes,
        generator=torch.Generator().manual_seed(turns),
    )
    ids = torch.Generator().manual_seed(1)

    def fresh(n: int) -> list[int]:
        return [int(t) for t in torch.randint(4, vocab, (n,), generator=ids)]

    contexts = [fresh(args.prompt) for _ in range(args.episodes)]
    keys = list(range(args.episodes)) if cached else None
    sampled = 0
    clock = time.process_time if args.timer == "cpu" else time.perf_counter
    with _KernelClock(clock) as kernel:
        start = clock()
        for _ in range(turns):
            replies = gen.generate_ids(contexts, args.tokens, keys)
            for context, g in zip(contexts, replies, strict=True):
                context.extend(g.ids)
                context.extend(fresh(args.reply))
                sampled += len(g.ids)
        seconds = clock() - start
    return seconds, gen.sampler.ids_fed, sampled, kernel.seconds


def _slope(xs: list[int], ys: list[float]) -> float:
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / sum(
        (a - mx) ** 2 for a in lx
    )


def _measure(args: argparse.Namespace) -> dict[tuple[str, int], list[Any]]:
    model, vocab = _model(args.quick)
    runs: dict[tuple[str, int], list[Any]] = {}
    _rollout(model, vocab, args, 2, True)  # warm-up (allocator, kernels)
    for _ in range(args.repeats):
        for turns in args.turns:
            for path in PATHS:  # alternate the two paths
                runs.setdefault((path, turns), []).append(
                    _rollout(model, vocab, args, turns, path == "cached")
                )
    return runs


def _table(args: argparse.Namespace, runs: dict[tuple[str, int], list[Any]]) -> list[str]:
    head = "| turns | " + " | ".join(f"{p} s (min-max)" for p in PATHS) + " | re-read / cached |"
    lines = [head, "|---|---|---|---|"]
    medians: dict[str, list[float]] = {p: [] for p in PATHS}
    for turns in args.turns:
        cells = []
        for path in PATHS:
            secs = [r[0] for r in runs[(path, turns)]]
            medians[path].append(statistics.median(secs))
            cells.append(f"{medians[path][-1]:.2f} ({min(secs):.2f}-{max(secs):.2f})")
        ratio = medians["re-read"][-1] / medians["cached"][-1]
        lines.append(f"| {turns} | {' | '.join(cells)} | {ratio:.1f}x |")
    exps = {p: _slope(list(args.turns), medians[p]) for p in PATHS}
    last = args.turns[-1]
    per_token = {p: runs[(p, last)][0][1] / runs[(p, last)][0][2] for p in PATHS}
    lines += [
        "",
        f"cost exponent {args.turns[0]}..{last} turns: cached {exps['cached']:.2f}, "
        f"re-read {exps['re-read']:.2f}",
        f"at {last} turns: re-read / cached = "
        f"{medians['re-read'][-1] / medians['cached'][-1]:.1f}x; context ids run through the "
        f"model per sampled id: cached {per_token['cached']:.1f}, "
        f"re-read {per_token['re-read']:.1f}",
        *_attention_lines(args, runs),
    ]
    return lines


def _attention_lines(args: argparse.Namespace, runs: dict[tuple[str, int], list[Any]]) -> list[str]:
    """The attention kernel's share of the time and the cost exponent of the rest (medians)."""
    last, share, rest = args.turns[-1], {}, {}
    for path in PATHS:
        outside = [statistics.median(r[0] - r[3] for r in runs[(path, t)]) for t in args.turns]
        rest[path] = _slope(list(args.turns), outside)
        secs = runs[(path, last)]
        share[path] = statistics.median(r[3] / r[0] for r in secs)
    return [
        f"attention kernel share of the time at {last} turns: cached {share['cached']:.0%}, "
        f"re-read {share['re-read']:.0%}; cost exponent of the time outside it: "
        f"cached {rest['cached']:.2f}, re-read {rest['re-read']:.2f}",
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=16, help="sampled ids per turn")
    ap.add_argument("--reply", type=int, default=8, help="environment reply ids per turn")
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--timer", choices=("wall", "cpu"), default="wall")
    ap.add_argument("--quick", action="store_true", help="2 and 4 turns, smallest model, once")
    ap.add_argument("--out", type=Path, help="also write the table to this file")
    args = ap.parse_args()
    args.turns = (2, 4) if args.quick else (8, 16, 32, 64)
    if args.quick:
        args.repeats, args.episodes, args.tokens = 1, 2, 4
    torch.set_num_threads(args.threads)
    runs = _measure(args)
    title = (
        f"Rollout of {args.episodes} episodes, {args.tokens} sampled + {args.reply} reply ids "
        f"per turn, prompt {args.prompt} ids; torch threads {args.threads}; "
        f"{args.timer} time, medians of {args.repeats}"
    )
    lines = [title, "", *_table(args, runs)]
    print("\n".join(lines))
    if args.out is not None:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
