"""The confirmatory design of issue 29 (docs/prereg.md, section *Issue 29*): gate, bases, stats.

:func:`run_design` runs the preregistered design and writes one machine-readable
``summary.json``:

1. **The gate.** The value of budget information (VoI: exact success of the best
   budget-aware policy minus that of the best budget-blind one, per budget) at the
   base's *measured* error rate (:func:`~budgetmix.training.experiment.pilot.sft_pilot`
   on pilot seeds). The run refuses to start (:class:`GateRefused`) unless VoI is
   at least :data:`GATE_POINTS` at every fraction in :data:`GATE_FRACTIONS`: below
   it no arm can gain from reading the budget, so the design could not show it.
2. **Bases, seed by seed.** Per SFT base ``b`` (``config.seed = b``: its own SFT
   and RL seeds; :func:`run_base`, one process per base if wanted): the SFT base,
   then for training seed 0, 1, ... every RL arm, each final checkpoint evaluated
   as soon as it is trained (pass@1 on the shared evaluation episodes at every
   design budget, and its start-state budget sensitivity) into one unit file
   ``base<b>/eval/<arm>-s<seed>.json``. Everything finished is reused (resume), and
   the summary can be rebuilt at any time from the units evaluated so far
   (:func:`write_summary`): the preregistered time limit stops the run between
   units, never on a result.
3. **Endpoints.** The unit is one (base, training seed). Primary: BudgetMix minus
   the masked control at 25-50% of the ceiling (:data:`PRIMARY`); secondary:
   BudgetMix minus fixed there. Each with the t interval over units, the exact
   sign-flip test over units and a hierarchical bootstrap (base -> seed ->
   episode) of the same mean (:mod:`.stats`).

``summary.json``: ``success`` rows (arm, base, seed, fraction, budget, success,
episodes), ``voi`` and ``gate``, ``endpoints``, ``units``, per-unit ``sensitivity``
and ``training`` (steps, tokens, updates). Command:
``python -m budgetmix.training.experiment.design --help``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from budgetmix._validate import parse_assignments
from budgetmix.exceptions import ConfigError
from budgetmix.training.diagnostics.stats import hierarchical_bootstrap, mean_test, sign_flip_test
from budgetmix.training.experiment.config import ExperimentConfig, experiment_preset

__all__ = [
    "GATE_FRACTIONS",
    "GATE_POINTS",
    "PRIMARY",
    "SECONDARY",
    "GateRefused",
    "contrast",
    "gate_verdict",
    "markdown",
    "run_base",
    "run_design",
    "success_rows",
    "write_summary",
]

#: The budget fractions the gate reads, and the VoI each needs (10 points).
GATE_FRACTIONS: tuple[float, ...] = (0.25, 0.5)
GATE_POINTS = 0.10
#: (arm, versus, fractions): the preregistered primary and secondary contrasts.
PRIMARY: tuple[str, str, tuple[str, ...]] = ("budgetmix", "budgetmix-masked", ("25%", "50%"))
SECONDARY: tuple[str, str, tuple[str, ...]] = ("budgetmix", "fixed", ("25%", "50%"))


class GateRefused(ConfigError):
    """The design's VoI gate failed: the run does not start (the message says where)."""


def _key(f: float) -> str:
    return f"{round(f * 100)}%"


def gate_verdict(
    config: ExperimentConfig, error_rate: float, *, source: str = "pilot"
) -> dict[str, Any]:
    """VoI per design budget at ``error_rate`` and whether the gate passes.

    The exact VoI (:func:`~budgetmix.training.diagnostics.voi.env_voi`) of ``config``'s
    environment at the design's own ceiling and fractions, read by
    :func:`~budgetmix.training.diagnostics.voi.gate` at :data:`GATE_FRACTIONS`;
    ``source`` says where the rate was measured (kept in the verdict).

    Raises:
        ConfigError: an error rate outside [0, 1], or an environment without an
            exact model.
    """
    from budgetmix.training.diagnostics.voi import env_voi, gate
    from budgetmix.training.experiment.environments import experiment_env

    env = experiment_env(config)
    table = env_voi(
        env.name, error_rate, env_kwargs=env.kwargs, fractions=config.budget_fractions,
        ceiling=env.ceiling,
    )  # fmt: skip
    verdict = gate(table, threshold=GATE_POINTS, fractions=GATE_FRACTIONS)
    return {
        "error_rate": error_rate,
        "source": source,
        "threshold_points": 100 * GATE_POINTS,
        "fractions": [_key(f) for f in GATE_FRACTIONS],
        "voi": [r | {"fraction": _key(r["fraction"])} for r in table.to_dict()["rows"]],
        "table": table.format(),
        "passed": verdict.passed,
        "reason": verdict.reason,
    }


def _check(verdict: dict[str, Any]) -> None:
    if not verdict["passed"]:
        raise GateRefused(
            f"gate: the design does not start: {verdict['reason']} at the base's measured "
            f"error rate {verdict['error_rate']:.3f} ({verdict['source']})"
        )


def success_rows(units: Sequence[dict[str, Any]], budgets: dict[str, int]) -> list[dict[str, Any]]:
    """One row per arm, base, seed and fraction from the evaluated units."""
    return [
        {
            "arm": u["arm"],
            "base": u["base"],
            "seed": u["seed"],
            "fraction": frac,
            "budget": budgets[frac],
            "success": bits.count("1") / len(bits),
            "episodes": len(bits),
        }
        for u in units
        for frac, bits in u["outcomes"].items()
    ]


def contrast(
    units: Sequence[dict[str, Any]], arm: str, versus: str, fractions: Sequence[str]
) -> dict[str, Any] | None:
    """``arm - versus``, mean over ``fractions``, paired per (base, seed) and per episode.

    A unit is one (base, training seed) where both arms are evaluated; within one,
    each evaluation episode's paired difference (the same slip seed under both arms)
    is averaged over the cells. Returns the t interval (``t``), the exact sign-flip
    test (``sign_flip``) and the hierarchical bootstrap (``bootstrap``, base -> seed
    -> episode) of the same mean, with every unit's value; ``None`` without a unit.

    Raises:
        ConfigError: a unit without one of ``fractions``.
    """
    got = {(u["arm"], u["base"], u["seed"]): u["outcomes"] for u in units}
    tree: dict[int, list[list[float]]] = {}
    rows: list[dict[str, Any]] = []
    for (name, b, s), out in sorted(got.items(), key=lambda kv: (kv[0][1], kv[0][2])):
        other = got.get((versus, b, s))
        if name != arm or other is None:
            continue
        if any(f not in out or f not in other for f in fractions):
            raise ConfigError(f"contrast: base {b} seed {s} lacks a cell of {list(fractions)}")
        n = min(len(out[f]) for f in fractions)
        episodes = [
            sum(int(out[f][i]) - int(other[f][i]) for f in fractions) / len(fractions)
            for i in range(n)
        ]
        tree.setdefault(b, []).append(episodes)
        rows.append({"base": b, "seed": s, "diff": sum(episodes) / n})
    if not rows:
        return None
    values = [r["diff"] for r in rows]
    return {
        "arm": arm,
        "versus": versus,
        "fractions": list(fractions),
        "units": rows,
        "mean": sum(values) / len(values),
        "t": mean_test(values).to_dict(),
        "sign_flip": sign_flip_test(values).to_dict(),
        "bootstrap": hierarchical_bootstrap(list(tree.values()), reps=2000, seed=29).to_dict(),
    }


def _unit_path(out: Path, arm: str, base: int, seed: int) -> Path:
    return out / f"base{base}" / "eval" / f"{arm}-s{seed}.json"


def _evaluate(run: Any, arm: str, path: Path, seed: int) -> dict[str, Any]:
    """One checkpoint on the shared evaluation episodes, and its start-state sensitivity."""
    from budgetmix.training.diagnostics.budget_sensitivity import budget_sensitivity
    from budgetmix.training.experiment.run import SENSITIVITY_OFFSET

    cfg, fmt = run.cfg, run.fmt(arm)
    grid = sorted(set(run.budgets.values()))
    policy = run.policy(path, seed)
    traces = run.grid_traces(policy, fmt, cfg.eval_episodes, 0, grid)
    outcomes = {
        f: "".join("1" if tr.success else "0" for tr in traces[t]) for f, t in run.budgets.items()
    }
    tasks = run.tasks(cfg.sens_episodes, SENSITIVITY_OFFSET)
    sens = budget_sensitivity(
        tasks, run.policy(path, 50_000 + seed),
        list(range(run.env.sensitivity_from, max(run.budgets.values()) + 1)),
        run.q, run.env.parse, moves=run.env.moves, notice_format=fmt,
    )  # fmt: skip
    keep = ("flip_action", "optimal_budgets", "other_budgets", "sensitivity", "low", "high")
    return {
        "outcomes": outcomes,
        "sensitivity": {k: v for k, v in sens.to_dict().items() if k in (*keep, "noise_floor")}
        | {"p_flip": [c.probabilities[sens.flip_action] for c in sens.cells]},
    }


def _save(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # one temporary name per process: the bases run in processes of their own and each
    # writes gate.json (the same content) at its start
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)  # atomic: a killed run leaves no half unit


def run_base(
    config: ExperimentConfig,
    out: Path,
    base: int,
    *,
    seeds: Sequence[int] | None = None,
    sft_only: bool = False,
    progress: bool = True,
) -> None:
    """SFT base ``base``, then seed by seed (``seeds``, default all, in order) every RL
    arm, each evaluated as soon as it is trained; ``sft_only`` stops after the SFT.

    Everything finished is reused (resume): the base, each RL run, each unit file.
    """
    from budgetmix.training.data.reproducibility import reproducible
    from budgetmix.training.experiment.analysis import train_summary
    from budgetmix.training.experiment.run import ExperimentRun

    cfg = config.with_overrides(seed=base)
    run = ExperimentRun(cfg, out / f"base{base}", progress)
    with reproducible(cfg.threads):
        base_dir = run.train_base()
        if sft_only:
            return
        if not _unit_path(out, "base", base, 0).is_file():
            unit = _evaluate(run, "base", base_dir, 0)
            _save(_unit_path(out, "base", base, 0), unit | {"arm": "base", "base": base, "seed": 0})
        for s in range(cfg.seeds) if seeds is None else seeds:
            for method in cfg.methods:
                target = _unit_path(out, method, base, s)
                if target.is_file():
                    continue
                path, metrics = run.train_arm(method, s, base_dir)
                unit = _evaluate(run, method, path, s)
                unit |= {"arm": method, "base": base, "seed": s, "training": train_summary(metrics)}
                _save(target, unit)


def run_design(
    config: ExperimentConfig,
    out_dir: str | Path,
    *,
    error_rate: float,
    bases: int = 2,
    only_base: int | None = None,
    seeds: Sequence[int] | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Check the gate, run every base (or ``only_base``; ``seeds`` of it, default all),
    then combine what is evaluated.

    Writes ``gate.json`` first, then per base ``base<b>/`` (its runs and one
    ``eval/<arm>-s<seed>.json`` per evaluated unit) and ``summary.json``.

    Raises:
        GateRefused: VoI below the gate at the measured ``error_rate`` (nothing is run).
        ConfigError: an invalid config or base index.
    """
    if not isinstance(bases, int) or bases < 1:
        raise ConfigError(f"bases: must be an integer >= 1, got {bases!r}")
    if only_base is not None and not 0 <= only_base < bases:
        raise ConfigError(f"only_base: must lie in 0..{bases - 1}, got {only_base!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    gate = gate_verdict(config, error_rate)
    _save(out / "gate.json", gate)
    _check(gate)
    for b in range(bases) if only_base is None else (only_base,):
        run_base(config, out, b, seeds=seeds, progress=progress)
    return write_summary(config, out, gate)


def write_summary(config: ExperimentConfig, out: Path, gate: dict[str, Any]) -> dict[str, Any]:
    """Combine every evaluated unit under ``out`` into ``out/summary.json`` (see the notes)."""
    from budgetmix.training.experiment.environments import experiment_env

    ceiling = experiment_env(config).ceiling
    budgets = {_key(f): max(1, round(f * ceiling)) for f in config.eval_fractions}
    units = [json.loads(p.read_text()) for p in sorted(out.glob("base*/eval/*.json"))]
    trained = [u for u in units if u["arm"] != "base"]
    endpoints = {
        name: contrast(units, a, b, fracs)
        for name, (a, b, fracs) in (("primary", PRIMARY), ("secondary", SECONDARY))
    }
    summary = {
        "design": "issue 29 (docs/prereg.md)",
        "config": config.to_dict(),
        "ceiling": ceiling,
        "budgets": budgets,
        "gate": gate,
        "voi": gate["voi"],
        "units": [list(u) for u in sorted({(u["base"], u["seed"]) for u in trained})],
        "success": success_rows(units, budgets),
        "endpoints": endpoints,
        "sensitivity": [
            {"arm": u["arm"], "base": u["base"], "seed": u["seed"], **u["sensitivity"]}
            for u in units
        ],
        "training": [
            {"arm": u["arm"], "base": u["base"], "seed": u["seed"], **u["training"]}
            for u in trained
        ],
    }
    _save(out / "summary.json", summary)
    return summary


def _pts(x: float) -> str:
    return f"{100 * x:+.1f}"


def _endpoint_line(name: str, c: dict[str, Any] | None) -> str:
    if c is None:
        return f"- **{name}**: no unit evaluated yet."
    t, sf, bs = c["t"], c["sign_flip"], c["bootstrap"]
    return (
        f"- **{name}** ({c['arm']} - {c['versus']}, mean over {'/'.join(c['fractions'])}, "
        f"{t['n']} units): **{_pts(c['mean'])} points**, t 95% [{_pts(t['lo'])}, "
        f"{_pts(t['hi'])}], sign-flip p {sf['p']:.3f} (smallest possible {sf['p_min']:.3f}), "
        f"bootstrap 95% [{_pts(bs['lo'])}, {_pts(bs['hi'])}]; per unit "
        + " ".join(_pts(u["diff"]) for u in c["units"])
        + "."
    )


def markdown(summary: dict[str, Any]) -> str:
    """The design's result as markdown (the README's main-job table is this text)."""
    fracs = list(summary["budgets"])
    cells: dict[tuple[str, str], list[float]] = {}
    for r in summary["success"]:
        cells.setdefault((r["arm"], r["fraction"]), []).append(r["success"])
    arms = [a for a in ("base", "fixed", "budgetmix", "budgetmix-masked")
            if any(k[0] == a for k in cells)]  # fmt: skip
    head = " | ".join(f"T={summary['budgets'][f]} ({f})" for f in fracs)
    lines = [
        f"| pass@1, % (mean over units) | {head} |",
        "|---" * (len(fracs) + 1) + "|",
        "| VoI at the gate's error rate, points | "
        + " | ".join(f"{100 * r['voi']:.1f}" for r in summary["voi"] if r["fraction"] in fracs)
        + " |",
    ]
    for arm in arms:
        vals = [cells.get((arm, f)) for f in fracs]
        shown = [f"{100 * sum(v) / len(v):.1f}" if v else "-" for v in vals]
        lines.append(f"| {arm} | " + " | ".join(shown) + " |")
    gate = summary["gate"]
    lines += [
        "",
        f"Gate: {'passed' if gate['passed'] else 'refused'} ({gate['reason']}; measured "
        f"error rate {gate['error_rate']:.3f}, {gate['source']}). Units (base, seed): "
        + (", ".join(f"({b}, {s})" for b, s in summary["units"]) or "none")
        + ".",
        "",
        _endpoint_line("Primary", summary["endpoints"]["primary"]),
        _endpoint_line("Secondary", summary["endpoints"]["secondary"]),
    ]
    return "\n".join(lines) + "\n"


def _pilot(config: ExperimentConfig, out: Path, seed: int, args: Any) -> int:
    """The SFT-only pilot on pilot seed ``seed`` (no RL): ``out/pilot.json``."""
    from budgetmix.training.experiment.pilot import sft_pilot

    steps = tuple(int(x) for x in args.checkpoints.split(",") if x)
    result = sft_pilot(
        config.with_overrides(seed=seed), out, episodes=args.episodes, checkpoints=steps
    )
    result["gate"] = gate_verdict(config, result["error_rate"]["rate"])
    (out / "pilot.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    for row in result["curve"]:
        sens, err = row["sensitivity"], row["error_rate"]
        print(
            f"sft steps {row['sft_steps']}: sensitivity {sens['sensitivity']:+.2f} "
            f"(noise floor {sens['noise_floor']:.2f}), error rate "
            f"{err['rate']:.3f} [{err['lo']:.3f}, {err['hi']:.3f}]"
        )
    print(f"gate at the final rate: {'passes' if result['gate']['passed'] else 'refuses'}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m budgetmix.training.experiment.design``: run, pilot or combine the design."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m budgetmix.training.experiment.design")
    p.add_argument("--preset", default="confirm", help="experiment preset (default: confirm)")
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=JSON",
        help="override a preset field (repeatable), e.g. --set sft_steps=600",
    )  # fmt: skip
    p.add_argument("--out", required=True, help="output folder (resumable)")
    p.add_argument("--error-rate", type=float, help="the pilot's measured error rate (the gate)")
    p.add_argument("--bases", type=int, default=2)
    p.add_argument("--base", type=int, default=None, help="run only this base")
    p.add_argument("--seeds", default=None, help="comma-separated training seeds (default: all)")
    p.add_argument("--sft-only", action="store_true", help="train the base's SFT only (no RL)")
    p.add_argument("--combine", action="store_true", help="only combine what is evaluated")
    p.add_argument(
        "--pilot", type=int, metavar="SEED",
        help="run the SFT-only pilot on this pilot SFT seed (no RL): pilot.json",
    )  # fmt: skip
    p.add_argument(
        "--recovery", action="store_true",
        help="item 6: RL against base from the base's states, every evaluated unit",
    )  # fmt: skip
    p.add_argument(
        "--slip-rate", type=float, default=0.0,
        help="recovery: the base's episodes under the error model at this rate (default 0)",
    )  # fmt: skip
    p.add_argument("--checkpoints", default="", help="pilot: SFT step counts also measured")
    p.add_argument("--episodes", type=int, default=32, help="pilot: episodes per value/budget")
    args = p.parse_args(argv)
    config = experiment_preset(args.preset, **parse_assignments("--set", args.set))
    out = Path(args.out)
    if args.pilot is not None:
        return _pilot(config, out, args.pilot, args)
    if args.recovery:
        from budgetmix.training.experiment.recovery import design_recovery, format_recovery

        result = design_recovery(config, out, bases=args.bases, slip_rate=args.slip_rate)
        _save(out / "recovery.json", result)
        print("\n".join(format_recovery(result)))
        return 0
    if args.sft_only:
        for b in range(args.bases) if args.base is None else (args.base,):
            run_base(config, out, b, sft_only=True)
        return 0
    if args.error_rate is None:
        p.error("--error-rate: the gate needs the pilot's measured error rate")
    if args.combine:
        summary = write_summary(config, out, gate_verdict(config, args.error_rate))
        (out / "summary.md").write_text(markdown(summary))
        return 0
    seeds = None if args.seeds is None else [int(x) for x in args.seeds.split(",") if x]
    run_design(
        config, out, error_rate=args.error_rate, bases=args.bases, only_base=args.base,
        seeds=seeds,
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
