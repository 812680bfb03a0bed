"""The end-to-end experiment (issue 19's preregistered design, docs/prereg.md).

:func:`run_experiment` runs, on a laptop CPU:

1. the exact oracle of the environment (ceiling, best achievable success per budget):
   ``frozenlake-compact`` on the map ``desc`` or ``faulty-tools-compact``, chosen by
   ``config.env`` (:mod:`.environments`);
2. a base policy: SFT on a noisy demonstrator (budget-aware by default);
3. RL from that base, per training seed, for each arm in ``methods`` (fixed T at
   the ceiling; BudgetMix with every budget in each group and budget-stratified
   baselines; the same with masked notice numbers), every arm under the same
   sampled-token budget (the stopping rule), the same KL anchor and schedule;
4. final checkpoints only: a Pass@(K,T) grid on shared evaluation episodes,
   the deployment pick on separate validation episodes, budget sensitivity at the
   start state, step-level action quality by expected Q, recovery;
5. seed-level statistics (the primary endpoint, Holm-corrected cells), collapses
   per arm, ``report.md``, PNG plots and ``summary.json`` in ``out_dir``.

The numbers are whatever comes out; the report states them with intervals.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from budgetmix.environment import Task
from budgetmix.exceptions import ConfigError
from budgetmix.progress import ProgressLine
from budgetmix.training.data.reproducibility import reproducible
from budgetmix.training.diagnostics.action_quality import compare_expected
from budgetmix.training.diagnostics.budget_sensitivity import budget_sensitivity
from budgetmix.training.diagnostics.episodes import (
    DecisionPoint,
    EpisodeTrace,
    Policy,
    invalid_reply,
    run_episodes,
    slipping,
)
from budgetmix.training.diagnostics.recovery_injection import recovery_injection
from budgetmix.training.envs.registry import env_tasks
from budgetmix.training.experiment.analysis import (
    ArmTraces,
    best_checkpoint,
    grid_rows,
    outcome_strings,
    pool_comparisons,
    pool_recovery,
    seed_statistics,
    sensitivity_summary,
    success_curves,
    success_table,
)
from budgetmix.training.experiment.config import ARM_SETTINGS, ExperimentConfig
from budgetmix.training.experiment.environments import experiment_env

__all__ = ["ExperimentReport", "ExperimentRun", "run_experiment"]

#: Slip seeds for evaluation and diagnostics start here (training draws below 10_000).
EVAL_SEED_BASE = 1_000_000
#: Offsets from EVAL_SEED_BASE: validation (deployment pick), sensitivity, diagnostics.
VALIDATION_OFFSET, SENSITIVITY_OFFSET, DIAGNOSTICS_OFFSET = 1_000_000, 2_000_000, 500_000


@dataclass(frozen=True)
class ExperimentReport:
    """What :func:`run_experiment` measured, and where it wrote.

    ``grid`` rows: ``arm, fraction, budget, k, value, lo, hi, episodes, successes,
    per_seed``. ``comparison`` rows: ``arm, fraction, budget, fixed, budgetmix,
    diff, lo, hi, p, p_holm, per_seed`` (mean pass@1 of fixed and of ``arm``, the
    mean paired per-seed difference with its 95% t-interval and Holm-corrected p),
    one block per pair. ``stats``: ``primary`` (the preregistered endpoint),
    ``contrasts`` (every pair's 25-75% mean difference), ``collapses`` (per arm),
    ``validation`` (the deployment pick). ``diagnostics``: ``sensitivity`` (arm ->
    per-seed start-cell budget sensitivity and the mean), ``action_quality`` (pair
    -> expected-Q shares with noise floors), ``recovery``, ``curves``. ``oracle``:
    exact success of the budget-aware optimum and the best budget-blind policy.
    ``environment``: the environment's name, label, moves and start-state decision.
    ``outcomes``: arm -> per seed -> budget fraction -> the evaluation episodes'
    successes in episode order (``"0110..."``; the same slip seeds in every arm and
    seed), from which ``summary.json``'s ``success`` (arm -> fraction -> per-seed
    pass@1) is computed.
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
    stats: dict[str, Any] = field(default_factory=dict)
    files: dict[str, Path] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    outcomes: dict[str, list[dict[str, str]]] = field(default_factory=dict)

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
            "stats": self.stats,
            "files": {k: str(v) for k, v in self.files.items()},
            "environment": self.environment,
            "success": success_table(self.outcomes),
            "outcomes": self.outcomes,
        }


def _say(progress: bool, text: str) -> None:
    if progress:
        print(f"[experiment] {text}", flush=True)


#: Every experiment block (training, evaluation, pilots) runs pinned: its kernels, its
#: intra-op threads and deterministic algorithms (issue 28; docs/training.md).
_threads = reproducible


def _fraction_key(f: float) -> str:
    return f"{round(f * 100)}%"


class ExperimentRun:
    """One experiment's shared state: its environment, ceiling, budgets and Q, and the
    stages that train (``train_base``, ``train_arm``) and evaluate checkpoints under
    ``out``; the design (:mod:`.design`) and the pilot (:mod:`.pilot`) build on it."""

    def __init__(self, config: ExperimentConfig, out: Path, progress: bool) -> None:
        self.cfg, self.out, self.progress = config, out, progress
        self.env = experiment_env(config)
        self.ceiling = self.env.ceiling
        self.budgets = {
            _fraction_key(f): max(1, round(f * self.ceiling)) for f in config.eval_fractions
        }
        self.env_kwargs = self.env.kwargs
        self.q = self.env.q
        self.timings: dict[str, float] = {}

    def timed(self, stage: str, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``, its wall time added to ``timings[stage]``."""
        t0 = time.perf_counter()
        result = fn(*args)
        self.timings[stage] = round(self.timings.get(stage, 0.0) + time.perf_counter() - t0, 2)
        return result

    def tasks(self, n: int, offset: int = 0) -> list[Task]:
        """``n`` tasks on slip seeds ``EVAL_SEED_BASE + offset + i``."""
        seeds = range(EVAL_SEED_BASE + offset, EVAL_SEED_BASE + offset + n)
        return env_tasks(self.env.name, seeds, self.env_kwargs)

    # -- training -------------------------------------------------------------------------
    def _train_config(self, name: str, **kw: Any) -> Any:
        from budgetmix.training.config import TrainConfig

        cfg = self.cfg
        base = {
            "env": self.env.name,
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
        """The BudgetMix budget sampler at the design's ceiling and fractions."""
        return {
            "kind": "budgetmix",
            "ceiling": self.ceiling,
            "fractions": list(self.cfg.budget_fractions),
        }

    def sft_sampler(self) -> dict[str, Any]:
        """SFT's budget sampler: BudgetMix's (``sft_budgets="design"``), or every T in
        1..ceiling equally often (``"every"``)."""
        if self.cfg.sft_budgets == "design":
            return self.mix_sampler()
        top = self.ceiling
        return {
            "kind": "budgetmix",
            "ceiling": top,
            "fractions": [k / top for k in range(1, top + 1)],
        }

    def train_base(self) -> Path:
        """SFT from scratch; a finished base already in ``out_dir`` is reused (resume)."""
        from budgetmix.training.trainer import train

        done = self.out / "runs" / "base" / "final"
        if (done / "model.safetensors").is_file():
            return done
        result = train(self.train_base_config())
        assert result.final_model_dir is not None
        return result.final_model_dir

    def train_base_config(self) -> Any:
        """The SFT base's ``TrainConfig`` (its initial model written under ``runs/init``)."""
        cfg = self.cfg
        init = {}
        if cfg.init_model is not None:  # a pretrained model (.pretrained)
            from budgetmix.training.experiment.pretrained import init_model_dir

            init = {"model_path": str(init_model_dir(cfg.init_model, self.out / "runs" / "init"))}
        elif cfg.max_number > 9:  # the model that reads the number (.numbers)
            from budgetmix.training.experiment.numbers import number_model

            path = number_model(
                self.out / "runs" / "init", max_number=cfg.max_number,
                hidden_size=cfg.hidden_size, num_layers=cfg.num_layers, seed=cfg.seed,
            )  # fmt: skip
            init = {"model_path": str(path)}
        return self._train_config(
            "base",
            **init,
            seed=cfg.seed,
            sft_steps=cfg.sft_steps,
            sft_batch=cfg.sft_batch,
            sft_error_rate=cfg.sft_error_rate,
            sft_lr=cfg.sft_lr,
            sampler=self.sft_sampler(),
            steps=0,
        )

    def train_arm(self, method: str, seed: int, base: Path) -> tuple[Path, list[dict[str, Any]]]:
        """One RL run of ``method`` from ``base`` until the token budget is spent.

        A finished run already in ``out_dir`` (its ``final/`` and log) is reused, so a
        rerun after a failure in a later stage does not train again.
        """
        from budgetmix.training.data.metrics import MetricsLog
        from budgetmix.training.trainer import train

        done = self.out / "runs" / f"{method}-s{seed}"
        if (done / "final" / "model.safetensors").is_file() and (done / "metrics.jsonl").is_file():
            return done / "final", MetricsLog(done / "metrics.jsonl").read()
        cfg = self.cfg
        groups, fmt = ARM_SETTINGS[method]
        sampler = (
            {"kind": "fixed", "turns": self.ceiling} if method == "fixed" else self.mix_sampler()
        )
        tc = self._train_config(
            f"{method}-s{seed}",
            model_path=str(base),
            seed=cfg.seed * 1000 + 1 + seed,
            sampler=sampler,
            group_budgets=groups,
            notice_format=fmt,
            sft_steps=0,
            steps=cfg.rl_steps,
            token_budget=cfg.token_budget,
            lr=cfg.lr,
            warmup_steps=cfg.warmup_steps,
            lr_decay="linear",
            zero_variance="skip",
            kl_coef=cfg.kl_coef,
            groups_per_step=cfg.groups_per_step,
            group_size=cfg.group_size,
        )
        result = train(tc)
        assert result.final_model_dir is not None
        return result.final_model_dir, result.metrics

    # -- evaluation ---------------------------------------------------------------------
    @staticmethod
    def fmt(arm: str) -> str:
        """The notice format an arm is trained and evaluated with (the base: unmasked)."""
        return ARM_SETTINGS.get(arm, ("shared", "v1-compact"))[1]

    def policy(self, path: Path, seed: int = 0) -> Policy:
        """The saved model at ``path`` as a sampling policy (seeded by the run and ``seed``)."""
        from budgetmix.training.experiment.lm import load_lm_policy

        policy, model, _ = load_lm_policy(path, seed=self.cfg.seed * 7919 + seed)
        if self.cfg.init_model is not None:  # the pretrained (GPU) preset evaluates on a GPU
            import torch

            if torch.cuda.is_available():
                model.to("cuda")
        return policy

    def grid_traces(
        self, policy: Policy, fmt: str, n: int, offset: int, budgets: list[int]
    ) -> dict[int, list[EpisodeTrace]]:
        """``n`` episodes per budget on slip seeds ``EVAL_SEED_BASE + offset + i``."""
        tasks = [t for _ in budgets for t in self.tasks(n, offset)]
        per_task = [b for b in budgets for _ in range(n)]
        bar = ProgressLine("eval grid", len(tasks), enabled=None if self.progress else False)
        traces = run_episodes(tasks, policy, per_task, notice_format=fmt, progress=bar)
        return {b: traces[i * n : (i + 1) * n] for i, b in enumerate(budgets)}

    def evaluate(self, arms: dict[str, list[Path]]) -> tuple[ArmTraces, ArmTraces]:
        """Final checkpoints: the grid on the evaluation seeds, then the validation seeds."""
        grid = sorted(set(self.budgets.values()))
        inside = sorted({t for t in self.budgets.values() if t <= self.ceiling})
        n, v = self.cfg.eval_episodes, self.cfg.val_episodes
        traces: ArmTraces = {}
        validation: ArmTraces = {}
        for arm, paths in arms.items():
            for i, p in enumerate(paths):
                pol, fmt = self.policy(p, i), self.fmt(arm)
                traces.setdefault(arm, []).append(self.grid_traces(pol, fmt, n, 0, grid))
                if arm != "base":
                    val = self.grid_traces(pol, fmt, v, VALIDATION_OFFSET, inside)
                    validation.setdefault(arm, []).append(val)
        return traces, validation

    def oracle_curves(self) -> dict[str, Any]:
        """Exact success of the aware optimum and the blind demonstrator per design budget."""
        aware, blind = self.env.curves(max(self.budgets.values()))
        return {
            "aware": {k: float(aware[t]) for k, t in self.budgets.items()},
            "blind_demonstrator": {k: float(blind[t]) for k, t in self.budgets.items()},
        }

    # -- diagnostics --------------------------------------------------------------------
    def sensitivity(self, arms: dict[str, list[Path]]) -> dict[str, Any]:
        """Per arm and seed, the start-state budget sensitivity (empty: not budget-dependent)."""
        budgets = list(range(self.env.sensitivity_from, max(self.budgets.values()) + 1))
        tasks = self.tasks(self.cfg.sens_episodes, SENSITIVITY_OFFSET)
        out: dict[str, Any] = {}
        for arm, paths in arms.items():
            rows = []
            for i, p in enumerate(paths):
                try:
                    res = budget_sensitivity(
                        tasks, self.policy(p, 50_000 + i), budgets, self.q, self.env.parse,
                        moves=self.env.moves, notice_format=self.fmt(arm),
                    )  # fmt: skip
                except ConfigError:  # the start state does not depend on the budget here
                    return {}
                rows.append(res.to_dict())
            out[arm] = sensitivity_summary(rows)
        return out

    def decision_points(
        self, base: Path, tasks: list[Task], *, slip_rate: float = 0.0
    ) -> list[DecisionPoint]:
        """The base policy's own episodes at the ceiling and at half of it, point by point.

        With ``slip_rate`` > 0 the base acts under the agent's error model (a random
        other move with that probability per turn, :func:`slipping`), so its episodes
        reach the states right after a mistake that a near-deterministic base never
        makes. Mistakes are judged by the exact Q (an action losing > 1 point of
        success probability).
        """
        base_policy = self.policy(base, 10_000)
        if slip_rate > 0:
            base_policy = slipping(base_policy, slip_rate, self.env.moves, seed=11_000)
        half = max(1, round(self.ceiling / 2))
        points: list[DecisionPoint] = []
        for budget in (self.ceiling, half):
            for tr in run_episodes(tasks, base_policy, budget, q=self.q, moves=self.env.moves):
                points.extend(tr.points)
        return points

    def action_quality(
        self, arms: dict[str, list[Path]], points: list[DecisionPoint]
    ) -> dict[str, Any]:
        """Every unmasked RL arm against the base (and against fixed) by expected Q, pooled.

        The masked arm is left out: these points carry the real notices it never sees.
        """
        methods = [m for m in self.cfg.methods if self.fmt(m) == "v1-compact"]
        pairs = [(m, "base") for m in methods]
        if "fixed" in methods:
            pairs += [(m, "fixed") for m in methods if m != "fixed"]
        quality: dict[str, Any] = {}
        for a, b in pairs:
            rows = []
            for s in range(self.cfg.seeds):
                pa = self.policy(arms[a][s if a != "base" else 0], 20_000 + s)
                pb = self.policy(arms[b][s if b != "base" else 0], 30_000 + s)
                res = compare_expected(
                    points, pa, pb, self.q, samples=self.cfg.diag_samples, moves=self.env.moves
                )
                rows.append(res.to_dict())
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
                        tasks, self.policy(p, 40_000 + i), self.ceiling, inject_at,
                        invalid_reply(), q=self.q, notice_format=self.fmt(arm),
                    ).to_dict()
                    for i, p in enumerate(paths)
                ]  # fmt: skip
                results.append(pool_recovery(per_seed))
            recovery[arm] = results
        return recovery

    def diagnostics(self, arms: dict[str, list[Path]], traces: ArmTraces) -> dict[str, Any]:
        """Sensitivity, action quality, recovery and success curves (the diagnostics block)."""
        tasks = self.tasks(self.cfg.diag_episodes, offset=DIAGNOSTICS_OFFSET)
        points = self.decision_points(arms["base"][0], tasks)
        return {
            "sensitivity": self.sensitivity(arms),
            "decision_points": len(points),
            "after_mistake_points": sum(p.after_mistake for p in points),
            "action_quality": self.action_quality(arms, points),
            "recovery": self.recovery(arms, tasks),
            "curves": success_curves(self.budgets, traces),
        }


def run_experiment(
    config: ExperimentConfig, out_dir: str | Path, *, progress: bool = True, workers: int = 1
) -> ExperimentReport:
    """Run the whole pipeline and write ``report.md``, ``summary.json`` and plots to ``out_dir``.

    ``workers``: processes for the RL runs (:func:`~.arms.train_arms`; the results do not
    depend on it).

    Raises:
        ConfigError: an invalid config, or ``workers`` not a whole number >= 1.
        MissingExtraError: torch/transformers/accelerate/gymnasium (or matplotlib,
            for the plots) are not installed.
    """
    from budgetmix._validate import check_int
    from budgetmix.training.data.provenance import record_run_fingerprint
    from budgetmix.training.experiment.arms import train_arms
    from budgetmix.training.experiment.report import write_report

    check_int("workers", workers, minimum=1)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    run = ExperimentRun(config, out, progress)
    with _threads(config.threads):
        _say(progress, f"{run.env.label}, ceiling {run.ceiling} turns; budgets {run.budgets}")
        arms, training = train_arms(run, workers)
        _say(progress, "evaluating final checkpoints (grid, then validation seeds)")
        traces, validation = run.timed("eval", run.evaluate, arms)
        _say(progress, "diagnostics")
        stats = seed_statistics(run.budgets, traces, training, config.methods)
        best, picked = best_checkpoint(arms, validation)
        stats["validation"] = picked
        report = ExperimentReport(
            config=config.to_dict(),
            ceiling=run.ceiling,
            budgets=run.budgets,
            oracle=run.oracle_curves(),
            grid=[r for a in arms for r in grid_rows(a, traces[a], run.budgets, config.pass_ks)],
            comparison=stats.pop("comparison"),
            diagnostics=run.timed("diagnostics", run.diagnostics, arms, traces),
            training=training,
            timings=run.timings,
            best_checkpoint=best,
            out_dir=out,
            stats=stats,
            environment=run.env.describe(),
            outcomes=outcome_strings(run.budgets, traces),
        )
        files = write_report(report)
        record_run_fingerprint(
            files["summary"], config.to_dict(), out, threads=config.threads,
            data=[config.base_model],
        )  # fmt: skip
    _say(progress, f"report: {files['report']}")
    return ExperimentReport(**{**report.__dict__, "files": files})
