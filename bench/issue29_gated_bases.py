"""Issue 29's second confirmatory run, unattended (docs/prereg.md, amendment 20:32 UTC
2026-12-02): every base is checked before any RL from it.

1. SFT bases in seed order (``--base-seeds``, two processes at a time), each 1000 SFT
   steps, trained into the design's own folder (``OUT/confirm/base<B>``), then measured
   on pilot episodes exactly as the pilot measures (``measure_base``): ``check-<B>.json``.
2. A base is kept when its start-state sensitivity is >= 0.5 and the gate passes at its
   own measured error rate; the first two kept, in seed order, are the run's bases. No
   new base starts after ``--last-start`` (UTC HH:MM).
3. RL and evaluation from each kept base (seeds 0..7 in order, the design's arms), then
   ``summary.json``; at ``--stop-at`` (UTC HH:MM) the summary is copied to
   ``summary-prereg.json``. Bases that fail the check get no RL and are reported.

Usage: ``.venv/bin/python bench/issue29_gated_bases.py OUT --stop-at 21:40``
(run from a snapshot; ``PYTHONPATH`` may point at the snapshot's installed copy).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from issue29_pipeline import DESIGN, ENV, at_utc, watch

SETS = ["--set", "sft_steps=1000", "--set", "seeds=8"]
#: ``--dry``: tiny sizes, to check the pipeline end to end
DRY = ["sft_steps=4", "sft_batch=2", "hidden_size=16", "rl_steps=1", "group_size=4",
       "eval_episodes=4", "sens_episodes=1", "seeds=2"]  # fmt: skip
EXTRA: list[str] = []
EPISODES = [32]
#: the start-state sensitivity a kept base needs (None: none; a budget-blind base's design)
MIN_S: list[float | None] = [0.5]
#: the exploration a kept base needs: (budget, minimum share of mixed groups), or None
EXPLORE: list[tuple[int, float] | None] = [None]


def check(out: Path, base: int) -> dict[str, object]:
    """SFT base ``base`` into ``out`` and measure it (run in a child process)."""
    from budgetmix._validate import parse_assignments
    from budgetmix.training.experiment.config import experiment_preset
    from budgetmix.training.experiment.design import gate_verdict, run_base
    from budgetmix.training.experiment.pilot import measure_base

    sets = [a for a in [*SETS, *EXTRA] if a != "--set"]
    cfg = experiment_preset("confirm", **parse_assignments("--set", sets))
    run_base(cfg, out, base, sft_only=True, progress=False)
    explore = EXPLORE[0]
    m = measure_base(cfg.with_overrides(seed=base), out / f"base{base}" / "runs" / "base" / "final",
                     episodes=EPISODES[0], explore_budget=None if explore is None else explore[0],
                     explore_episodes=4 * EPISODES[0])  # fmt: skip
    rate = float(m["error_rate"]["rate"])
    gate = gate_verdict(cfg, rate, source=f"base {base}")
    s = float(m["sensitivity"]["sensitivity"])
    reads = MIN_S[0] is None or s >= MIN_S[0]
    varies = explore is None or float(m["exploration"]["mixed_groups"]) >= explore[1]
    result = {"base": base, "sensitivity": s, "error_rate": rate, "gate_passed": gate["passed"],
              "explores": varies, "kept": reads and varies and bool(gate["passed"]),
              "measure": m}  # fmt: skip
    (out / f"check-{base}.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def _spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(args, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=ENV)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--stop-at", required=True, help="UTC HH:MM of the preregistered summary")
    p.add_argument("--last-start", default="21:10", help="UTC HH:MM: no base starts later")
    p.add_argument("--base-seeds", default="2,3,4,5,6,7", help="SFT seeds, in order")
    p.add_argument("--dry", action="store_true")
    p.add_argument("--force-rl", action="store_true", help="with --dry: keep every base")
    p.add_argument("--check", type=int, help=argparse.SUPPRESS)  # the child's entry
    args = p.parse_args()
    if args.dry:
        EXTRA.extend(a for s in DRY for a in ("--set", s))
        EPISODES[0] = 1
    root = Path(args.out)
    out = root / "confirm"
    out.mkdir(parents=True, exist_ok=True)
    if args.check is not None:
        check(out, args.check)
        return 0
    me = [sys.executable, __file__, str(root), "--stop-at", args.stop_at, *(["--dry"] * args.dry)]
    seeds = [int(x) for x in args.base_seeds.split(",")]
    kept: list[dict[str, object]] = []
    checked: list[dict[str, object]] = []
    while len(kept) < 2 and seeds and dt.datetime.now(dt.UTC) < at_utc(args.last_start):
        pair, seeds = seeds[:2], seeds[2:]
        procs = [_spawn([*me, "--check", str(b)], root / f"check-{b}.log") for b in pair]
        for proc in procs:
            proc.wait()
        for b in pair:
            path = out / f"check-{b}.json"
            if not path.is_file():
                raise SystemExit(f"base {b}'s check failed: see check-{b}.log")
            result = json.loads(path.read_text())
            checked.append(result)
            if (result["kept"] or (args.dry and args.force_rl)) and len(kept) < 2:
                kept.append(result)
    verdict = {"checked": [{k: v for k, v in c.items() if k != "measure"} for c in checked],
               "kept": [c["base"] for c in kept]}  # fmt: skip
    (root / "bases.json").write_text(json.dumps(verdict, indent=1) + "\n")
    print(json.dumps(verdict))
    if not kept:
        return 0
    rate = max(float(c["error_rate"]) for c in kept)  # type: ignore[arg-type]
    if args.dry and args.force_rl:
        rate = 0.2  # a tiny base errs at random: the gate would refuse
    common = [*SETS, *EXTRA, "--error-rate", repr(rate), "--out", str(out)]
    procs = [_spawn([*DESIGN, *common, "--bases", "100", "--base", str(c["base"])],
                    root / f"base{c['base']}.log")
             for c in kept]  # fmt: skip
    watch(procs, out, [*DESIGN, *common, "--combine"], args.stop_at, 5.0 if args.dry else 120.0)
    return 1 if any(proc.returncode for proc in procs) else 0


if __name__ == "__main__":
    raise SystemExit(main())
