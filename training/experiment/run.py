"""The end-to-end experiment: does BudgetMix RL beat fixed-budget RL at short budgets, on a CPU?

:func:`run_experiment` runs the whole pipeline of issue 7 on one slippery
FrozenLake map (:mod:`budgetmix.training.envs.frozenlake_compact`) with a tiny char-level LM:

1. the exact oracle picks the ceiling (the smallest T where the budget-aware
   optimum reaches 90% of its no-limit success) and gives the best achievable
   success at every budget (aware) and that of the best budget-blind policy;
2. a base policy: SFT on a noisy, budget-blind demonstrator;
3. RL from that base, per seed, for each arm in ``methods`` (fixed budget at the
   ceiling; BudgetMix with a shared or mixed T per GRPO group), every arm with
   the same number of rollouts and updates;
4. a Pass@(K,T) grid at fractions of the ceiling (and beyond it) with intervals;
5. diagnostics (:mod:`.diagnostics`): step-level action quality from the same
   states (exact Q), overall and right after a mistake; success vs T curves;
   recovery after a forced invalid reply;
6. ``report.md``, PNG plots and ``summary.json`` in ``out_dir``
   (:mod:`.report`).

The numbers are whatever comes out; the report states them with intervals and
says when a difference is within noise.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from budgetmix.environment import Task
from budgetmix.progress import ProgressLine
from budgetmix.training.diagnostics import (
    DecisionPoint,
    EpisodeTrace,
    Policy,
    compare_actions,
    frozenlake_q,
    invalid_reply,
    recovery_injection,
    run_episodes,
)
from budgetmix.training.envs.frozenlake_compact import COMPACT_ENV_NAME
from budgetmix.training.envs.frozenlake_oracle import (
    FrozenLakeModel,
    aware_success_curve,
    find_ceiling,
    policy_success_curve,
    stationary_policy,
)
from budgetmix.training.envs.registry import env_tasks
from budgetmix.training.experiment.analysis import (
    ArmTraces,
    best_checkpoint,
    comparison_rows,
    grid_rows,
    pool_comparisons,
    pool_recovery,
    success_curves,
    train_summary,
)
from budgetmix.training.experiment.config import ExperimentConfig

__all__ = ["ExperimentReport", "run_experiment"]

#: Slip seeds for evaluation and diagnostics start here (training draws below 10_000).
EVAL_SEED_BASE = 1_000_000


@dataclass(frozen=True)
class ExperimentReport:
    """What :func:`run_experiment` measured, and where it wrote.

    ``grid`` rows: ``arm, fraction, budget, k, value, lo, hi, episodes, successes,
    per_seed``. ``comparison`` rows: ``arm, fraction, budget, fixed, budgetmix,
    diff, lo, hi`` (pass@1 of fixed and of the BudgetMix ``arm``, their
    difference and its 95% interval), one block per BudgetMix arm. ``diagnostics``:
    ``action_quality`` (pair -> shares), ``recovery`` (arm -> results),
    ``curves`` (arm -> success per budget). ``oracle``: exact success of the
    budget-aware optimum and the best budget-blind policy per budget.
    """

    config: dict[str, Any]
    ceiling: int
    budgets: dict[str, int]
    oracle: dict[str, Any]
    grid: list[dict[str, Any]]
    comparison: list[dict[str, Any]]
    diagnostics: dict[str, Any]
    training: dict[str, Any]
    timings: dict[str, float]
    best_checkpoint: Path
    out_dir: Path
    files: dict[str, Path] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (what ``summary.json`` holds)."""
        return {
            "config": self.config,
            "ceiling": self.ceiling,
            "budgets": self.budgets,
            "oracle": self.oracle,
            "grid": self.grid,
            "comparison": self.comparison,
            "diagnostics": self.diagnostics,
            "training": self.training,
            "timings": self.timings,
            "best_checkpoint": str(self.best_checkpoint),
            "files": {k: str(v) for k, v in self.files.items()},
        }


def _say(progress: bool, text: str) -> None:
    if progress:
        print(f"[experiment] {text}", flush=True)


@contextmanager
def _threads(n: int) -> Iterator[None]:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _fraction_key(f: float) -> str:
    return f"{round(f * 100)}%"


class _Run:
    """One experiment: shared state of the stages."""

    def __init__(self, config: ExperimentConfig, out: Path, progress: bool) -> None:
        self.cfg, self.out, self.progress = config, out, progress
        self.model = FrozenLakeModel(config.desc, True, config.success_rate)
        self.ceiling = config.ceiling or find_ceiling(self.model)
        self.budgets = {
            _fraction_key(f): max(1, round(f * self.ceiling)) for f in config.eval_fractions
        }
        self.env_kwargs = {
            "desc": list(config.desc),
            "success_rate": config.success_rate,
            "demo_gamma": config.demo_gamma,
        }
        self.q = frozenlake_q(self.model)
        self.timings: dict[str, float] = {}

    def timed(self, stage: str, fn: Callable[..., Any], *args: Any) -> Any:
        t0 = time.perf_counter()
        result = fn(*args)
        self.timings[stage] = round(self.timings.get(stage, 0.0) + time.perf_counter() - t0, 2)
        return result

    def tasks(self, n: int, offset: int = 0) -> list[Task]:
        seeds = range(EVAL_SEED_BASE + offset, EVAL_SEED_BASE + offset + n)
        return env_tasks(COMPACT_ENV_NAME, seeds, self.env_kwargs)

    # -- training -------------------------------------------------------------------------
    def _train_config(self, name: str, **kw: Any) -> Any:
        from budgetmix.training.config import TrainConfig

        cfg = self.cfg
        base = {
            "env": COMPACT_ENV_NAME,
            "env_kwargs": self.env_kwargs,
            "sampler": self.mix_sampler(),
            "notice_format": "v1-compact",
            "hidden_size": cfg.hidden_size,
            "num_layers": cfg.num_layers,
            "num_heads": 4,
            "num_kv_heads": 2,
            "max_new_tokens": 3,
            "max_total_tokens": 4096,
            "minibatch_size": cfg.groups_per_step * cfg.group_size,
            "save_every": 10**6,
            "progress": self.progress,
            "output_dir": str(self.out / "runs" / name),
        }
        return TrainConfig(**{**base, **kw})

    def mix_sampler(self) -> dict[str, Any]:
        return {
            "kind": "budgetmix",
            "ceiling": self.ceiling,
            "fractions": list(self.cfg.budget_fractions),
        }

    def train_base(self) -> Path:
        from budgetmix.training.trainer import train

        cfg = self.cfg
        tc = self._train_config(
            "base",
            seed=cfg.seed,
            sft_steps=cfg.sft_steps,
            sft_batch=cfg.sft_batch,
            sft_error_rate=cfg.sft_error_rate,
            sft_lr=cfg.sft_lr,
            steps=0,
        )
        result = train(tc)
        assert result.final_model_dir is not None
        return result.final_model_dir

    def train_arm(self, method: str, seed: int, base: Path) -> tuple[Path, list[dict[str, Any]]]:
        from budgetmix.training.trainer import train

        cfg = self.cfg
        sampler = (
            {"kind": "fixed", "turns": self.ceiling} if method == "fixed" else self.mix_sampler()
        )
        tc = self._train_config(
            f"{method}-s{seed}",
            model_path=str(base),
            seed=cfg.seed * 1000 + 1 + seed,
            sampler=sampler,
            group_budgets="mixed" if method == "budgetmix-mixed" else "shared",
            sft_steps=0,
            steps=cfg.rl_steps,
            lr=cfg.lr,
            kl_coef=cfg.kl_coef,
            groups_per_step=cfg.groups_per_step,
            group_size=cfg.group_size,
        )
        result = train(tc)
        assert result.final_model_dir is not None
        return result.final_model_dir, result.metrics

    # -- evaluation ---------------------------------------------------------------------
    def policy(self, path: Path, seed: int = 0) -> Policy:
        from budgetmix.training.experiment.lm import load_lm_policy

        return load_lm_policy(path, seed=self.cfg.seed * 7919 + seed)[0]

    def grid_traces(self, policy: Policy) -> dict[int, list[EpisodeTrace]]:
        n = self.cfg.eval_episodes
        budgets = sorted(set(self.budgets.values()))
        tasks = [t for _ in budgets for t in self.tasks(n)]
        per_task = [b for b in budgets for _ in range(n)]
        bar = ProgressLine("eval grid", len(tasks), enabled=None if self.progress else False)
        traces = run_episodes(tasks, policy, per_task, progress=bar)
        return {b: traces[i * n : (i + 1) * n] for i, b in enumerate(budgets)}

    def oracle_curves(self) -> dict[str, Any]:
        top = max(self.budgets.values())
        aware = aware_success_curve(self.model, top)
        blind = policy_success_curve(
            self.model, stationary_policy(self.model, self.cfg.demo_gamma), top
        )
        return {
            "aware": {k: float(aware[t]) for k, t in self.budgets.items()},
            "blind_demonstrator": {k: float(blind[t]) for k, t in self.budgets.items()},
        }

    # -- diagnostics --------------------------------------------------------------------
    def decision_points(self, base: Path, tasks: list[Task]) -> list[DecisionPoint]:
        """The base policy's own episodes at the ceiling and at half of it, point by point.

        Mistakes are judged by the exact Q (an action losing > 1 point of success
        probability).
        """
        base_policy = self.policy(base, 10_000)
        half = max(1, round(self.ceiling / 2))
        points: list[DecisionPoint] = []
        for budget in (self.ceiling, half):
            for tr in run_episodes(tasks, base_policy, budget, q=self.q):
                points.extend(tr.points)
        return points

    def action_quality(
        self, arms: dict[str, list[Path]], points: list[DecisionPoint]
    ) -> dict[str, Any]:
        """Every arm against the base (and against fixed), from the same points, pooled."""
        methods = self.cfg.methods
        pairs = [(m, "base") for m in methods]
        if "fixed" in methods:
            pairs += [(m, "fixed") for m in methods if m != "fixed"]
        quality: dict[str, Any] = {}
        for a, b in pairs:
            rows = []
            for s in range(self.cfg.seeds):
                pa = self.policy(arms[a][s if a != "base" else 0], 20_000 + s)
                pb = self.policy(arms[b][s if b != "base" else 0], 30_000 + s)
                rows.append(compare_actions(points, pa, pb, self.q).to_dict())
            quality[f"{a} vs {b}"] = pool_comparisons(rows)
        return quality

    def recovery(self, arms: dict[str, list[Path]], tasks: list[Task]) -> dict[str, Any]:
        """Per arm, success after an invalid reply forced at ``inject_at`` (at the ceiling)."""
        inject_at = self.cfg.inject_at
        recovery: dict[str, Any] = {}
        for arm, paths in arms.items():
            results = []
            if inject_at <= self.ceiling:
                per_seed = [
                    recovery_injection(
                        tasks,
                        self.policy(p, 40_000 + i),
                        self.ceiling,
                        inject_at,
                        invalid_reply(),
                        q=self.q,
                    ).to_dict()
                    for i, p in enumerate(paths)
                ]
                results.append(pool_recovery(per_seed))
            recovery[arm] = results
        return recovery

    def diagnostics(self, arms: dict[str, list[Path]], traces: ArmTraces) -> dict[str, Any]:
        """Action quality, recovery and success curves (the report's diagnostics block)."""
        tasks = self.tasks(self.cfg.diag_episodes, offset=500_000)
        points = self.decision_points(arms["base"][0], tasks)
        return {
            "decision_points": len(points),
            "after_mistake_points": sum(p.after_mistake for p in points),
            "action_quality": self.action_quality(arms, points),
            "recovery": self.recovery(arms, tasks),
            "curves": success_curves(self.budgets, traces),
        }


def _train(run: _Run) -> tuple[dict[str, list[Path]], dict[str, Any]]:
    """The SFT base (or the configured one), then every RL arm per seed from it."""
    config = run.cfg
    base = (
        Path(config.base_model)
        if config.base_model is not None
        else run.timed("sft_base", run.train_base)
    )
    arms: dict[str, list[Path]] = {"base": [base]}
    training: dict[str, Any] = {}
    for s in range(config.seeds):
        for method in config.methods:
            _say(run.progress, f"RL {method}, seed {s}")
            path, metrics = run.timed(f"rl_{method}", run.train_arm, method, s, base)
            arms.setdefault(method, []).append(path)
            training.setdefault(method, []).append(train_summary(metrics))
    return arms, training


def run_experiment(
    config: ExperimentConfig, out_dir: str | Path, *, progress: bool = True
) -> ExperimentReport:
    """Run the whole pipeline and write ``report.md``, ``summary.json`` and plots to ``out_dir``.

    Raises:
        ConfigError: an invalid config.
        MissingExtraError: torch/transformers/accelerate/gymnasium (or matplotlib,
            for the plots) are not installed.
    """
    from budgetmix.training.experiment.report import write_report

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    run = _Run(config, out, progress)
    with _threads(config.threads):
        _say(
            progress,
            f"map {'/'.join(config.desc)}, slip {config.success_rate}, "
            f"ceiling {run.ceiling} turns; budgets {run.budgets}",
        )
        arms, training = _train(run)
        _say(progress, "evaluating the Pass@(K,T) grid")
        traces: ArmTraces = {
            arm: [run.timed("eval", run.grid_traces, run.policy(p, i)) for i, p in enumerate(paths)]
            for arm, paths in arms.items()
        }
        _say(progress, "diagnostics")
        report = ExperimentReport(
            config=config.to_dict(),
            ceiling=run.ceiling,
            budgets=run.budgets,
            oracle=run.oracle_curves(),
            grid=[
                row
                for arm in arms
                for row in grid_rows(arm, traces[arm], run.budgets, config.pass_ks)
            ],
            comparison=comparison_rows(run.budgets, traces),
            diagnostics=run.timed("diagnostics", run.diagnostics, arms, traces),
            training=training,
            timings=run.timings,
            best_checkpoint=best_checkpoint(arms, traces, run.budgets, run.ceiling),
            out_dir=out,
        )
        files = write_report(report)
    _say(progress, f"report: {files['report']}")
    return ExperimentReport(**{**report.__dict__, "files": files})
