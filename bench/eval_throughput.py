"""Evaluator throughput vs concurrency with a simulated model latency, and prefix-sharing savings.

    .venv/bin/python bench/eval_throughput.py [--latency 0.02] [--turns 8] [--repeats 3]

Part 1: an agent whose every action takes ``--latency`` seconds (``asyncio.sleep``
for the async agent, ``time.sleep`` in the evaluator's thread pool for the sync
one) plays episodes of exactly ``--turns`` turns; ``4 x concurrency`` episodes
per measurement. Ideal scaling is ``concurrency x`` the single-episode rate;
the target is at least 0.8 of it at 32.

Part 2: a budget-blind agent on a grid of budgets, run with prefix sharing and
with separate runs per budget; the table gives model calls (= env steps) and
wall time of both.

Part 3 (``--workers-only`` runs just this part): a CPU-bound agent (``--cpu-ms``
of busy work per turn) played by the thread executor and by the process pool
(:class:`~budgetmix.evaluation.executors.ProcessExecutor`) at 1 and 2 workers:
episodes/s side by side and the ratio 2 workers / 1 worker (goal 1.8x on two
idle cores), with the machine's load average; then the evaluator's own CPU per
8-turn episode (an agent and environment that cost nothing, one episode in
flight; goal <= 1 ms).

Prints markdown tables with medians over ``--repeats``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

from budgetmix.environment import StepLabel, StepResult, Task
from budgetmix.evaluation import EvalConfig, Evaluator
from budgetmix.evaluation.executors import ProcessExecutor, ThreadExecutor, UnitExecutor


class WalkEnv:
    """Reach ``goal`` with ``+``; anything else does nothing."""

    name = "walk"

    def __init__(self, goal: int) -> None:
        self.goal = goal
        self.pos = 0

    def instructions(self) -> str:
        return "walk"

    def reset(self, seed: int) -> str:
        self.pos = 0
        return "0"

    def step(self, action: str) -> StepResult:
        ok = action == "+"
        self.pos += int(ok)
        return StepResult(
            observation=str(self.pos),
            done=self.pos >= self.goal,
            success=self.pos >= self.goal,
            label=StepLabel(progress=ok, valid=ok, mistake=None if ok else "model_format_error"),
        )


class AsyncAgent:
    sees_budget = True

    def __init__(self, latency: float, p_plus: float = 1.0) -> None:
        self.latency, self.p_plus, self.rng = latency, p_plus, random.Random(0)

    def start(self, env: object, seed: int) -> None:
        self.rng = random.Random(seed)

    async def act(self, observation: str, notice: str | None, turns_remaining: int | None) -> str:
        await asyncio.sleep(self.latency)
        return "+" if self.rng.random() < self.p_plus else "?"


class SyncAgent(AsyncAgent):
    def act(self, observation: str, notice: str | None, turns_remaining: int | None) -> str:  # type: ignore[override]
        time.sleep(self.latency)
        return "+" if self.rng.random() < self.p_plus else "?"


class BlindAgent(AsyncAgent):
    sees_budget = False


def throughput(agent_cls: type[AsyncAgent], conc: int, latency: float, turns: int) -> float:
    tasks = [Task(task_id=f"t{i}", make_env=lambda: WalkEnv(turns), seed=i) for i in range(conc)]
    cfg = EvalConfig(budgets=(turns * 2,), samples=4, concurrency=conc)
    with tempfile.TemporaryDirectory() as d:
        run = Evaluator(lambda: agent_cls(latency), tasks, cfg).run(Path(d) / "r.jsonl")
    assert all(r.turns_used == turns for r in run.records)
    return len(run.records) / run.elapsed_s


def sharing(shared: bool, latency: float) -> tuple[int, int, float]:
    tasks = [Task(task_id=f"t{i}", make_env=lambda: WalkEnv(12), seed=i) for i in range(8)]
    cfg = EvalConfig(budgets=(4, 8, 16, 32), samples=4, concurrency=32, prefix_sharing=shared)
    with tempfile.TemporaryDirectory() as d:
        run = Evaluator(lambda: BlindAgent(latency, 0.7), tasks, cfg).run(Path(d) / "r.jsonl")
    return len(run.records), run.env_steps, run.elapsed_s


class BusyAgent(AsyncAgent):
    """Burns ``latency`` seconds of CPU per action (a local model's forward pass)."""

    def act(self, observation: str, notice: str | None, turns_remaining: int | None) -> str:  # type: ignore[override]
        end = time.thread_time() + self.latency
        while time.thread_time() < end:
            pass
        return "+"


def cpu_bound(executor: UnitExecutor, cpu_s: float, turns: int, episodes: int) -> float:
    """Episodes/s of ``episodes`` CPU-bound episodes of ``turns`` turns under ``executor``."""
    tasks = [
        Task(task_id=f"t{i}", make_env=lambda: WalkEnv(turns), seed=i) for i in range(episodes)
    ]
    cfg = EvalConfig(budgets=(turns * 2,), concurrency=2)
    with tempfile.TemporaryDirectory() as d:
        run = Evaluator(lambda: BusyAgent(cpu_s), tasks, cfg).run(
            Path(d) / "r.jsonl", executor=executor
        )
    return len(run.records) / run.elapsed_s


def own_cost(turns: int, episodes: int) -> float:
    """The evaluator's CPU seconds per episode with an agent and environment that cost nothing."""
    tasks = [
        Task(task_id=f"t{i}", make_env=lambda: WalkEnv(turns), seed=i) for i in range(episodes)
    ]
    cfg = EvalConfig(budgets=(turns * 2,), concurrency=1)
    with tempfile.TemporaryDirectory() as d:
        t0 = time.process_time()
        Evaluator(lambda: SyncAgent(0.0), tasks, cfg).run(Path(d) / "r.jsonl")
        return (time.process_time() - t0) / episodes


def workers_part(args: argparse.Namespace) -> None:
    """Part 3: episodes/s at 1 and 2 workers, and the evaluator's own cost."""
    cpu_s, n = args.cpu_ms / 1000, args.episodes
    load = os.getloadavg()[0]
    rows: dict[str, list[float]] = {
        "thread (1 core)": [],
        "process, 1 worker": [],
        "process, 2 workers": [],
    }
    for _ in range(args.repeats):  # interleaved, so load drifts hit every row alike
        rows["thread (1 core)"].append(cpu_bound(ThreadExecutor(), cpu_s, args.turns, n))
        rows["process, 1 worker"].append(cpu_bound(ProcessExecutor(1), cpu_s, args.turns, n))
        rows["process, 2 workers"].append(cpu_bound(ProcessExecutor(2), cpu_s, args.turns, n))
    print(
        f"CPU-bound agent: {args.cpu_ms:g} ms CPU per turn, {args.turns} turns, {n} episodes, "
        f"median of {args.repeats}; load average {load:.2f} -> {os.getloadavg()[0]:.2f} (1 min), "
        f"{os.cpu_count()} CPUs\n"
    )
    print("| executor | episodes/s (median, min-max) |")
    print("|---|---|")
    med = {}
    for name, eps in rows.items():
        med[name] = statistics.median(eps)
        print(f"| {name} | {med[name]:.2f} ({min(eps):.2f}-{max(eps):.2f}) |")
    ratio = med["process, 2 workers"] / med["process, 1 worker"]
    print(f"\n2 workers / 1 worker: {ratio:.2f}x (goal 1.8x on two idle cores)")
    cost = statistics.median(own_cost(8, 200) for _ in range(args.repeats))
    print(f"evaluator's own CPU per 8-turn episode: {cost * 1000:.2f} ms (goal <= 1 ms)\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latency", type=float, default=0.02)
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cpu-ms", type=float, default=5.0, help="part 3: CPU per turn")
    ap.add_argument("--episodes", type=int, default=24, help="part 3: episodes per run")
    ap.add_argument("--workers-only", action="store_true", help="run part 3 only")
    args = ap.parse_args()
    workers_part(args)
    if args.workers_only:
        return
    print(
        f"latency {args.latency * 1000:.0f} ms/turn, {args.turns} turns/episode, "
        f"4 x concurrency episodes, median of {args.repeats}\n"
    )
    print("| concurrency | async eps/s | ideal eps/s | efficiency | sync eps/s | efficiency |")
    print("|---|---|---|---|---|---|")
    base: dict[str, float] = {}
    for conc in (1, 4, 8, 16, 32):
        row = []
        for name, cls in (("async", AsyncAgent), ("sync", SyncAgent)):
            eps = statistics.median(
                throughput(cls, conc, args.latency, args.turns) for _ in range(args.repeats)
            )
            base.setdefault(name, eps)
            row.append((eps, eps / (conc * base[name])))
        ideal = conc / (args.latency * args.turns)
        (a, ae), (s, se) = row
        print(f"| {conc} | {a:.1f} | {ideal:.1f} | {ae:.2f} | {s:.1f} | {se:.2f} |")
    print("\nEfficiency = eps/s / (concurrency x measured eps/s at concurrency 1).\n")
    print("| mode | records | model calls = env steps | wall s |")
    print("|---|---|---|---|")
    res = {}
    for shared in (True, False):
        runs = [sharing(shared, args.latency) for _ in range(args.repeats)]
        n, steps = runs[0][0], runs[0][1]
        wall = statistics.median(r[2] for r in runs)
        res[shared] = (steps, wall)
        print(f"| {'prefix sharing' if shared else 'separate runs'} | {n} | {steps} | {wall:.2f} |")
    saved = 1 - res[True][0] / res[False][0]
    print(
        f"\nPrefix sharing (budgets 4/8/16/32, K=4, 8 tasks, budget-blind agent): "
        f"{saved:.0%} fewer model calls and env steps, {res[False][1] / res[True][1]:.1f}x faster."
    )


if __name__ == "__main__":
    main()
