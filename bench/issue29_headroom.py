"""Issue 29's headroom design, unattended (docs/prereg.md, amendment 05:35 UTC 2026-12-03).

The 20:32 design's bases read the number but hardly erred, so RL had nothing to fix and
BudgetMix RL could not differ from fixed-budget RL. Here SFT learns every move its
demonstrator *took* (``sft_labels="taken"``, errors at e = 0.2 included), so the base
reads the number *and* errs; everything else is the ``confirm`` preset at 1000 SFT steps.

1. Two pilot bases (``--pilot-seeds``, in parallel), each checked as the 20:32 design
   checks a base (``measure_base``: start-state sensitivity >= 0.5 and the gate at its
   own measured error rate): ``pilot/check-<B>.json``.
2. Power, on the first kept pilot base: the fixed and BudgetMix arms at training seeds
   0..3 (two processes). From the four paired differences (BudgetMix - fixed over T = 3
   and 6, the primary endpoint) the minimum detectable effect of 16 units at 80% power
   and two-sided 5% (t with 15 degrees of freedom; within-base spread only), and RL's
   headroom: the mean share of updates not skipped as zero-variance (``verdict.json``).
   Confirmatory RL runs only if the MDE is <= 5 points **and** at least half the
   updates were taken, in both arms.
3. The confirmatory design: bases checked in seed order (``--base-seeds``, two at a
   time), the first two kept, seeds 0..7 of each, all three arms; ``summary.json``
   rebuilt every 2 minutes and copied to ``summary-prereg.json`` at ``--stop-at``.

``--blind`` (amendment 07:08 UTC 2026-12-03): the base is accurate but budget-blind. SFT
learns only the clean moves of the stationary blind demonstrator (``demo_budget_aware =
false``, ``sft_labels = "optimal"``), so its headroom lies at the low budgets that only
BudgetMix RL sees. A base is kept on the gate alone (its sensitivity is reported, not
required: it is blind by design), and the power check needs the BudgetMix arm, not the
fixed one, to take at least half its updates.

``--explore SHARE`` (amendment 11:19 UTC 2026-12-03; implies ``--blind``): the blind
demonstrator also takes the guess route whatever the budget (a guess at ``SHARE`` of its
turns on an unfinished chain, then the answer), and SFT learns it (``sft_guess_share``),
so the base *samples* the guess that the plain blind base never did (amendment 07:41).
A base is kept only if, besides the gate, at least half of its groups of 8 would vary
at the design's 25% budget (T = 3): ``1 - p^8 - (1 - p)^8 >= 0.5`` for its success
share ``p`` on 128 pilot episodes there.

Usage: ``python bench/issue29_headroom.py OUT --stop-at HH:MM --last-start HH:MM``
(run from a snapshot; ``PYTHONPATH`` may point at the snapshot's installed copy);
``--dry``: tiny sizes, the whole pipeline end to end (``--force-rl``: every gate passes).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import issue29_gated_bases as gated
from issue29_gated_bases import _spawn
from issue29_pipeline import DESIGN, ENV, at_utc, watch

TAKEN = ["--set", 'sft_labels="taken"']
BLIND = ["--set", "demo_budget_aware=false", "--set", 'sft_labels="optimal"']
TWO_ARMS = ["--set", 'methods=["fixed","budgetmix"]']
#: t quantiles with 15 degrees of freedom (16 units): two-sided 5%, and 80% power
T_975, T_80 = 2.131, 0.866
MDE_MAX, TAKEN_MIN = 0.05, 0.5
#: ``--explore``: the budget at which groups must vary (25% of the ceiling 13), and how often
EXPLORE_BUDGET, MIXED_MIN = 3, 0.5


def _checks(me: list[str], root: Path, stage: str, seeds: list[int]) -> list[dict[str, object]]:
    """Check ``seeds`` (one process each, all at once) into ``root/stage``; their results."""
    out = root / stage
    out.mkdir(parents=True, exist_ok=True)
    procs = [_spawn([*me, "--check", str(b), "--stage", stage], out / f"check-{b}.log")
             for b in seeds]  # fmt: skip
    for proc in procs:
        proc.wait()
    results = []
    for b in seeds:
        path = out / f"check-{b}.json"
        if not path.is_file():
            raise SystemExit(f"base {b}'s check failed: see {out}/check-{b}.log")
        results.append(json.loads(path.read_text()))
    return results


def power(root: Path, base: int, rate: float, dry: bool, blind: bool) -> dict[str, object]:
    """Stage 2: four units of the fixed and BudgetMix arms on pilot base ``base``
    (``blind``: only BudgetMix must take half its updates)."""
    out = root / "pilot"
    common = [*gated.SETS, *gated.EXTRA, *TWO_ARMS, "--error-rate", repr(rate), "--out", str(out)]
    one = [*common, "--bases", "1000", "--base", str(base)]
    procs = [_spawn([*DESIGN, *one, "--seeds", s], out / f"power-{s.replace(',', '')}.log")
             for s in ("0,1", "2,3")]  # fmt: skip
    if any(p.wait() for p in procs):
        raise SystemExit(f"the power pilot failed: see {out}/power-*.log")
    subprocess.run([*DESIGN, *common, "--combine"], env=ENV, check=True)
    summary = json.loads((out / "summary.json").read_text())
    diffs = [u["diff"] for u in summary["endpoints"]["secondary"]["units"]]
    sd = statistics.stdev(diffs) if len(diffs) > 1 else float("inf")
    mde = (T_975 + T_80) * sd / 16**0.5
    runs = summary["training"]
    taken = {
        arm: statistics.mean(1 - t["skipped_updates"] / t["steps"] for t in runs if t["arm"] == arm)
        for arm in ("fixed", "budgetmix")
    }
    need = ("budgetmix",) if blind else ("fixed", "budgetmix")
    go = mde <= MDE_MAX and all(taken[arm] >= TAKEN_MIN for arm in need)
    return {"base": base, "units": len(diffs), "sd": sd, "mde_16_units": mde,
            "updates_taken": taken, "go": go or dry}  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--stop-at", required=True, help="UTC HH:MM of the preregistered summary")
    p.add_argument("--last-start", required=True, help="UTC HH:MM: no confirmatory base after")
    p.add_argument("--pilot-seeds", default="112,113", help="two pilot SFT seeds")
    p.add_argument("--base-seeds", default="8,9,10,11,12,13", help="confirmatory SFT seeds")
    p.add_argument("--blind", action="store_true", help="the budget-blind clean-label base")
    p.add_argument("--explore", type=float, default=0.0,
                   help="with a blind base: the demonstrator's guess share (implies --blind)")
    p.add_argument("--dry", action="store_true")
    p.add_argument("--force-rl", action="store_true", help="with --dry: keep every base")
    p.add_argument("--check", type=int, help=argparse.SUPPRESS)  # the child's entry
    p.add_argument("--stage", default="confirm", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.blind = args.blind or args.explore > 0
    gated.EXTRA.extend(BLIND if args.blind else TAKEN)
    if args.explore:
        gated.EXTRA.extend(["--set", f"sft_guess_share={args.explore!r}"])
        gated.EXPLORE[0] = (EXPLORE_BUDGET, MIXED_MIN)
    if args.blind:
        gated.MIN_S[0] = None
    if args.dry:
        gated.EXTRA.extend(a for s in gated.DRY for a in ("--set", s))
        gated.EPISODES[0] = 1
    root = Path(args.out)
    if args.check is not None:
        gated.check(root / args.stage, args.check)
        return 0
    flags = [*(["--dry"] * args.dry), *(["--blind"] * args.blind),
             *(["--explore", repr(args.explore)] if args.explore else [])]  # fmt: skip
    me = [sys.executable, __file__, str(root), "--stop-at", args.stop_at,
          "--last-start", args.last_start, *flags]  # fmt: skip
    force = args.dry and args.force_rl
    pilots = _checks(me, root, "pilot", [int(x) for x in args.pilot_seeds.split(",")])
    kept = [c for c in pilots if c["kept"] or force]
    verdict: dict[str, object] = {"pilots": [{k: v for k, v in c.items() if k != "measure"}
                                             for c in pilots]}  # fmt: skip
    if kept:
        rate = 0.2 if force else float(kept[0]["error_rate"])  # type: ignore[arg-type]
        verdict["power"] = power(root, int(kept[0]["base"]), rate, force, args.blind)  # type: ignore[call-overload]
    (root / "verdict.json").write_text(json.dumps(verdict, indent=1) + "\n")
    print(json.dumps(verdict))
    if not kept or not verdict["power"]["go"]:  # type: ignore[index]
        return 0
    seeds = [int(x) for x in args.base_seeds.split(",")]
    bases: list[dict[str, object]] = []
    while len(bases) < 2 and seeds and dt.datetime.now(dt.UTC) < at_utc(args.last_start):
        pair, seeds = seeds[:2], seeds[2:]
        bases += [c for c in _checks(me, root, "confirm", pair) if c["kept"] or force]
    bases = bases[:2]
    (root / "bases.json").write_text(json.dumps([c["base"] for c in bases]) + "\n")
    if not bases:
        return 0
    rate = 0.2 if force else max(float(c["error_rate"]) for c in bases)  # type: ignore[arg-type]
    out = root / "confirm"
    common = [*gated.SETS, *gated.EXTRA, "--error-rate", repr(rate), "--out", str(out)]
    procs = [_spawn([*DESIGN, *common, "--bases", "1000", "--base", str(c["base"])],
                    root / f"base{c['base']}.log") for c in bases]  # fmt: skip
    watch(procs, out, [*DESIGN, *common, "--combine"], args.stop_at, 5.0 if args.dry else 120.0)
    return 1 if any(proc.returncode for proc in procs) else 0


if __name__ == "__main__":
    raise SystemExit(main())
