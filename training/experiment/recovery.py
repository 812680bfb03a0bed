"""The paper's recovery finding on the confirmatory design's checkpoints (issue 29 item 6).

For each RL arm that sees the real notice (``fixed``, ``budgetmix``) and each
evaluated unit (base, training seed): from the *same* states, the base's own
episodes at the ceiling and at half of it (decision-point slip seeds of the
diagnostics range, never the evaluation episodes), the share of states where the
unit's expected Q beats its base's
(:func:`~budgetmix.training.diagnostics.action_quality.recovery_analysis`, ``samples``
draws per point and policy), over all states and right after a mistake
(a step that lost more than the mistake tolerance), each beside its noise floor (a
policy against itself). The unit of analysis is the unit: means over units with t
intervals. The paper reports 46.8 / 42.8% of all states against 67.3 / 65.7% right
after a mistake. Reported, no claim (docs/prereg.md, *Issue 29*).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from budgetmix.exceptions import ConfigError
from budgetmix.training.experiment.config import ExperimentConfig

__all__ = ["RECOVERY_ARMS", "design_recovery", "format_recovery"]

#: The arms compared with their base (the masked arm never sees the notices on these states).
RECOVERY_ARMS: tuple[str, ...] = ("fixed", "budgetmix")


def _units(out: Path, arm: str, base: int) -> list[tuple[int, Path]]:
    """(seed, final checkpoint) of every evaluated unit of ``arm`` on ``base``, by seed."""
    rows = []
    for unit in sorted((out / f"base{base}" / "eval").glob(f"{arm}-s*.json")):
        seed = int(unit.stem.rsplit("-s", 1)[1])
        final = out / f"base{base}" / "runs" / f"{arm}-s{seed}" / "final"
        if (final / "model.safetensors").is_file():
            rows.append((seed, final))
    return sorted(rows)


def design_recovery(
    config: ExperimentConfig,
    out_dir: str | Path,
    *,
    bases: int = 2,
    episodes: int | None = None,
    samples: int | None = None,
    slip_rate: float = 0.0,
) -> dict[str, Any]:
    """Every evaluated unit of each :data:`RECOVERY_ARMS` arm against its base.

    ``episodes`` base episodes per budget (default ``config.diag_episodes``) and
    ``samples`` draws per point (default ``config.diag_samples``). ``slip_rate``: the
    base's episodes are played under the agent's error model at that rate (a random
    other move per turn), so a base that rarely errs still reaches states right after
    a mistake; 0 plays the base as it is. Returns a JSON-ready dict: per arm the mean
    shares over units with intervals and noise floors, and per unit its comparison;
    a base with no non-tied state right after a mistake is listed in ``skipped_bases``.

    Raises:
        ConfigError: no evaluated unit under ``out_dir``.
    """
    out = Path(out_dir)
    n_eps = config.diag_episodes if episodes is None else episodes
    n_samples = config.diag_samples if samples is None else samples
    per_unit: dict[str, list[dict[str, Any]]] = {arm: [] for arm in RECOVERY_ARMS}
    skipped: list[dict[str, Any]] = []
    for b in range(bases):
        comps, skip = _base_recovery(config, out, b, n_eps, n_samples, slip_rate)
        for arm, rows in comps.items():
            per_unit[arm].extend(rows)
        if skip is not None:
            skipped.append(skip)
    if not any(per_unit.values()) and not skipped:
        raise ConfigError(f"design_recovery: no evaluated unit with a checkpoint under {out}")
    arms = {arm: _pool(comps) for arm, comps in per_unit.items() if comps}
    return {"episodes": n_eps, "samples": n_samples, "slip_rate": slip_rate, "arms": arms,
            "skipped_bases": skipped}  # fmt: skip


def _base_recovery(
    config: ExperimentConfig,
    out: Path,
    b: int,
    n_eps: int,
    n_samples: int,
    slip_rate: float,
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any] | None]:
    """Base ``b``'s unit comparisons per arm, and its skip record if it has nothing to compare."""
    from budgetmix.training.data.reproducibility import reproducible
    from budgetmix.training.diagnostics.action_quality import non_tied, recovery_analysis
    from budgetmix.training.experiment.run import DIAGNOSTICS_OFFSET, ExperimentRun

    cfg = config.with_overrides(seed=b)
    run = ExperimentRun(cfg, out / f"base{b}", False)
    base_dir = out / f"base{b}" / "runs" / "base" / "final"
    units = {arm: _units(out, arm, b) for arm in RECOVERY_ARMS}
    per_unit: dict[str, list[dict[str, Any]]] = {}
    if not (base_dir / "model.safetensors").is_file() or not any(units.values()):
        return per_unit, None
    with reproducible(cfg.threads):
        tasks = run.tasks(n_eps, offset=DIAGNOSTICS_OFFSET)
        points = run.decision_points(base_dir, tasks, slip_rate=slip_rate)
        graded = non_tied(points, run.q, 0.01, run.env.moves)
        if not any(p.after_mistake for p in graded):
            # nothing to recover from: no mistake, or only at states where no move matters
            reason = (
                "every state right after a mistake is tied (no move matters there)"
                if any(p.after_mistake for p in points)
                else "the base made no mistake on its own episodes"
            )
            return per_unit, {"base": b, "points": len(points), "reason": reason}
        for arm, rows in units.items():
            if not rows:
                continue
            rl = {f"b{b}-s{s}": run.policy(p, 50_000 + s) for s, p in rows}
            res = recovery_analysis(
                points, run.policy(base_dir, 60_000), rl, run.q, samples=n_samples,
                moves=run.env.moves,
            )  # fmt: skip
            for name, comp in zip(res.seeds, res.per_seed, strict=True):
                per_unit.setdefault(arm, []).append({"unit": name, **comp.to_dict()})
    return per_unit, None


def _pool(comps: list[dict[str, Any]]) -> dict[str, Any]:
    """Means over units with t intervals, and the mean noise floors."""
    from budgetmix.training.diagnostics.stats import mean_test

    def floor(key: str) -> float | None:
        vals = [c[key] for c in comps if c[key] is not None]
        return sum(vals) / len(vals) if vals else None

    gap = [(c["a_better_after_mistake"] or 0.0) - (c["a_better"] or 0.0) for c in comps]
    return {
        "units": len(comps),
        "all_states": mean_test([c["a_better"] or 0.0 for c in comps]).to_dict(),
        "after_mistake": mean_test([c["a_better_after_mistake"] or 0.0 for c in comps]).to_dict(),
        "gap": mean_test(gap).to_dict(),
        "noise_floor": floor("noise_floor"),
        "noise_floor_after_mistake": floor("noise_floor_after_mistake"),
        "per_unit": comps,
    }


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def format_recovery(result: dict[str, Any]) -> list[str]:
    """One line per arm: the two shares with their intervals beside their noise floors."""
    lines = []
    for arm, r in result["arms"].items():
        a, m, g = r["all_states"], r["after_mistake"], r["gap"]
        lines.append(
            f"{arm} vs base, {r['units']} units: better at {_pct(a['mean'])} "
            f"[{_pct(a['lo'])}, {_pct(a['hi'])}] of all states (noise floor "
            f"{_pct(r['noise_floor'])}), {_pct(m['mean'])} [{_pct(m['lo'])}, {_pct(m['hi'])}] "
            f"right after a mistake (noise floor {_pct(r['noise_floor_after_mistake'])}); "
            f"gap {100 * g['mean']:+.1f} points [{100 * g['lo']:+.1f}, {100 * g['hi']:+.1f}]"
        )
    for skip in result.get("skipped_bases", ()):
        lines.append(f"base {skip['base']} skipped: {skip['reason']} "
                     f"({skip['points']} decision points)")  # fmt: skip
    return lines
