"""The SFT-only pilot (issue 29 items 3 and 5): what the base reads, and how often it errs.

Before any RL, :func:`sft_pilot` trains the design's SFT base on a *pilot* seed
and measures on pilot episodes (slip seeds from :data:`PILOT_SEED_BASE`, disjoint
from every confirmatory range):

* the budget sensitivity at the start state
  (:func:`~budgetmix.training.diagnostics.budget_sensitivity.budget_sensitivity`): whether the
  model reads the turns-left count, at the environment's own threshold;
* the base's **measured error rate**: on its own episodes at every design budget,
  the share of its moves that are not the exact optimum, among decision points
  whose optimum is one move (the error model of the demonstrator, "with
  probability e a random other move", predicts exactly e there). The VoI gate
  reads the value of budget information at this rate, not at the demonstrator's.

Nothing here is confirmatory; the pilot's checkpoints are never reused.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

from budgetmix.exceptions import ConfigError
from budgetmix.training.diagnostics.budget_sensitivity import budget_sensitivity
from budgetmix.training.diagnostics.episodes import EpisodeTrace, QFunction, run_episodes
from budgetmix.training.envs.registry import env_tasks
from budgetmix.training.experiment.config import ExperimentConfig

__all__ = ["PILOT_SEED_BASE", "exploration", "measure_base", "measured_error_rate", "sft_pilot"]

#: Slip seeds of pilot episodes: above every confirmatory range (run.EVAL_SEED_BASE + 3M).
PILOT_SEED_BASE = 7_000_000
#: Moves whose Q differ by at most this are tied (the pilot grades no tied point).
_TIE = 1e-9


def measured_error_rate(
    traces: Sequence[EpisodeTrace], q: QFunction, moves: Sequence[str], parse: Any
) -> dict[str, Any]:
    """The share of non-optimal moves at decision points with one optimal move.

    The moves the base *took* on its own episodes, graded at the points
    :func:`~budgetmix.training.diagnostics.action_quality.unique_best` keeps (one best move, by more
    than 1e-9); :func:`~budgetmix.training.diagnostics.action_quality.measure_error_rate` is the
    same share from fresh draws at given points. A reply that is none of the moves
    counts as an error. Returns ``rate``, the number of ``points`` and ``errors``, and
    a normal 95% interval (it treats the points as independent; points of one episode
    are not, so it is too narrow).

    Raises:
        ConfigError: no decision point has a single optimal move.
    """
    from budgetmix.training.diagnostics.action_quality import unique_best

    taken = {id(p): a for tr in traces for p, a in zip(tr.points, tr.actions, strict=False)}
    graded = unique_best([p for tr in traces for p in tr.points if id(p) in taken], q, moves,
                         tol=_TIE)  # fmt: skip
    if not graded:
        raise ConfigError("measured_error_rate: no decision point with a single optimal move")
    points = len(graded)
    errors = sum(parse(taken[id(p)]) != moves.index(best) for p, best in graded)
    rate = errors / points
    half = 1.96 * math.sqrt(rate * (1 - rate) / points)
    return {
        "rate": rate,
        "lo": max(0.0, rate - half),
        "hi": min(1.0, rate + half),
        "points": points,
        "errors": errors,
    }


def _pilot_tasks(run: Any, episodes: int) -> list[Any]:
    """``episodes`` tasks of ``run``'s environment on pilot slip seeds."""
    return list(env_tasks(
        run.env.name, range(PILOT_SEED_BASE, PILOT_SEED_BASE + episodes), run.env_kwargs
    ))  # fmt: skip


def _measure(run: Any, policy: Any, episodes: int) -> dict[str, Any]:
    """The start-state sensitivity and the measured error rate of ``policy`` (see the notes)."""
    top = max(run.budgets.values())
    tasks = _pilot_tasks(run, episodes)
    sens = budget_sensitivity(
        tasks, policy, list(range(run.env.sensitivity_from, top + 1)), run.q,
        run.env.parse, moves=run.env.moves,
    )  # fmt: skip
    inside = sorted({t for t in run.budgets.values() if t <= run.ceiling})
    traces = [
        tr for b in inside for tr in run_episodes(tasks, policy, b, q=run.q, moves=run.env.moves)
    ]
    return {
        "sensitivity": {k: v for k, v in sens.to_dict().items() if k != "cells"}
        | {"p_flip": {c.turns_left: c.probabilities[sens.flip_action] for c in sens.cells}},
        "error_rate": measured_error_rate(traces, run.q, run.env.moves, run.env.parse),
    }


def exploration(
    run: Any, policy: Any, budget: int, *, episodes: int, group_size: int
) -> dict[str, Any]:
    """Whether on-policy RL groups can vary at ``budget`` turns: ``policy``'s success
    share ``p`` on ``episodes`` pilot episodes, and the share of groups of ``group_size``
    independent rollouts whose outcomes differ, ``1 - p**g - (1 - p)**g`` (a group
    whose rollouts all agree has no advantage and is skipped as zero-variance).

    Raises:
        ConfigError: ``budget``, ``episodes`` or ``group_size`` below 1.
    """
    from budgetmix._validate import check_int

    check_int("episodes", episodes, minimum=1)
    check_int("group_size", group_size, minimum=1)
    traces = run_episodes(_pilot_tasks(run, episodes), policy, budget, q=run.q, moves=run.env.moves)
    p = sum(tr.success for tr in traces) / len(traces)
    mixed = 1.0 - p**group_size - (1.0 - p) ** group_size
    return {"budget": budget, "episodes": episodes, "success": p, "group_size": group_size,
            "mixed_groups": mixed}  # fmt: skip


def measure_base(
    config: ExperimentConfig,
    model_dir: str | Path,
    *,
    episodes: int = 32,
    explore_budget: int | None = None,
    explore_episodes: int = 128,
) -> dict[str, Any]:
    """The pilot's measurement of a saved base (``model_dir``), on pilot episodes.

    The same start-state sensitivity and measured error rate as :func:`sft_pilot`,
    with the same sampling seed for ``config.seed``, so a base the pilot trained
    measures here exactly as the pilot measured it. Used to check each confirmatory
    base before any RL from it (docs/prereg.md, amendment 20:32 UTC 2026-12-02).
    ``explore_budget``: after those, also :func:`exploration` at that budget on
    ``explore_episodes`` pilot episodes, with the config's group size (the earlier
    measurements are unchanged by it).
    """
    from budgetmix.training.data.reproducibility import reproducible
    from budgetmix.training.experiment.lm import load_lm_policy
    from budgetmix.training.experiment.run import ExperimentRun

    run = ExperimentRun(config, Path(model_dir).parent, False)
    with reproducible(config.threads):
        policy = load_lm_policy(Path(model_dir), seed=_policy_seed(config))[0]
        out = dict(_measure(run, policy, episodes))
        if explore_budget is not None:
            out["exploration"] = exploration(run, policy, explore_budget,
                                             episodes=explore_episodes,
                                             group_size=config.group_size)  # fmt: skip
        return out


def _policy_seed(config: ExperimentConfig) -> int:
    return config.seed * 7919 + 60_000


def sft_pilot(
    config: ExperimentConfig,
    out_dir: str | Path,
    *,
    episodes: int = 64,
    progress: bool = True,
    checkpoints: Sequence[int] = (),
) -> dict[str, Any]:
    """Train ``config``'s SFT base (its ``seed`` is the pilot seed) and measure it.

    ``episodes`` fresh starts per turns-left value for the sensitivity and
    ``episodes`` base episodes per design budget for the error rate. Writes nothing
    but the base's training directory under ``out_dir``; returns a JSON-ready dict.
    ``checkpoints``: SFT step counts below ``config.sft_steps`` at which the same
    measurement is also taken, on the model as trained so far (one run, measured
    along the way: ``curve``, one entry per step count, the last one
    ``config.sft_steps``); the sampling seed is the same at every step count.

    Raises:
        ConfigError: an invalid config or checkpoint, or a start state that is not
            budget-dependent.
    """
    from budgetmix.training.data.reproducibility import reproducible
    from budgetmix.training.experiment.lm import load_lm_policy
    from budgetmix.training.experiment.run import ExperimentRun

    steps = sorted(set(checkpoints))
    if any(not isinstance(k, int) or not 0 < k < config.sft_steps for k in steps):
        raise ConfigError(f"checkpoints: SFT step counts in 1..{config.sft_steps - 1}")
    run = ExperimentRun(config, Path(out_dir), progress)
    curve: list[dict[str, Any]] = []
    with reproducible(config.threads):
        if steps:
            base = _train_measuring(run, steps, episodes, curve)
        else:
            base = run.timed("sft_base", run.train_base)
        policy = load_lm_policy(base, seed=_policy_seed(config))[0]
        last = run.timed("measure", _measure, run, policy, episodes)
    return {
        "config": config.to_dict(),
        "environment": run.env.describe(),
        "ceiling": run.ceiling,
        "budgets": run.budgets,
        "base": str(base),
        **last,
        "curve": [*curve, {"sft_steps": config.sft_steps, **last}],
        "timings": run.timings,
    }


def _train_measuring(
    run: Any, steps: Sequence[int], episodes: int, curve: list[dict[str, Any]]
) -> Path:
    """Train ``run``'s SFT base (``run`` an ``ExperimentRun``) in one run, measuring it
    after each of ``steps`` (appended to ``curve``); the final model's directory."""
    from budgetmix.training.data.reproducibility import reproducible
    from budgetmix.training.experiment.lm import LMPolicy
    from budgetmix.training.trainer import Trainer

    config = run.cfg
    tc = run.train_base_config()
    with reproducible(config.threads, seed=tc.seed):  # as trainer.train starts a run
        trainer = Trainer(tc)
    trainer.log.path.unlink(missing_ok=True)  # a fresh run starts a fresh log
    for k in steps:
        run.timed("sft_base", partial(trainer.run, stop_after=k))
        lm = LMPolicy(trainer.policy, trainer.tokenizer, seed=_policy_seed(config))
        curve.append({"sft_steps": k, **run.timed("measure", _measure, run, lm, episodes)})
        trainer.model.train()
    result = run.timed("sft_base", trainer.run)
    assert result.final_model_dir is not None
    return Path(result.final_model_dir)
