"""Issue 29's preregistered run, unattended (docs/prereg.md, amendments 13:35, 19:30 and
19:52 UTC 2026-12-02).

1. Two SFT-only pilots in parallel, on pilot seeds (``--pilot-seeds``): the first on
   the design's own chain (preset ``confirm``: 4 links with 30% faults since 19:52, 5 links
   from 19:30, 6 before) and the second on the 4-link chain with 20% faults (a second
   threshold), each 1000 SFT steps, measured at
   500 and 1000 of the same run.
2. The decision (``verdict.json``): the smallest of 500 and 1000 SFT steps at which
   both pilots reach start-state sensitivity >= 0.5 and the gate passes at the
   design-chain pilot's measured error rate. None: no RL, the pipeline stops.
3. The confirmatory design at that step count: bases 0 and 1 in two processes, seeds
   0..7 in order; ``summary.json`` rebuilt every 5 minutes, and copied once to
   ``summary-prereg.json`` at the preregistered time (``--stop-at``, UTC HH:MM).

Usage: ``.venv/bin/python bench/issue29_pipeline.py OUT_DIR --stop-at 15:35``
(run from a snapshot; ``PYTHONPATH`` may point at the snapshot's installed copy).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

DESIGN = [sys.executable, "-m", "budgetmix.training.experiment.design"]
FOUR_LINKS = 'env_kwargs={"hops": 4, "fault_p": 0.2, "guess_p": 0.3}'
STEPS = [500, 1000]
PAUSE = [300.0]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
#: ``--set`` pairs added to every design call (``--dry``: a tiny run of the whole pipeline).
EXTRA: list[str] = []
DRY = ["sft_steps=4", "sft_batch=2", "hidden_size=16", "rl_steps=1", "group_size=4",
       "eval_episodes=4", "sens_episodes=1"]  # fmt: skip


#: The design-chain pilot's folder (``pilot6`` in the rounds before 19:30, with 6 links).
MAIN = "pilot-design"


def _spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([*DESIGN, *args, *EXTRA], stdout=log.open("wb"),
                            stderr=subprocess.STDOUT, env=ENV)  # fmt: skip


SEEDS = ["110", "111"]  # the pilot SFT seeds (design chain, 4 links): --pilot-seeds


def pilots(root: Path) -> None:
    common = ["--checkpoints", str(STEPS[0]), "--episodes", "32", "--set", f"sft_steps={STEPS[1]}"]
    procs = [
        _spawn(["--out", str(root / MAIN), "--pilot", SEEDS[0], *common], root / f"{MAIN}.log"),
        _spawn(
            ["--out", str(root / "pilot4"), "--pilot", SEEDS[1], "--set", FOUR_LINKS, *common],
            root / "pilot4.log",
        ),
    ]
    if any(p.wait() for p in procs):
        raise SystemExit(f"a pilot failed: see {MAIN}.log and pilot4.log")


def decide(root: Path) -> dict[str, object]:
    from budgetmix.training.experiment.config import experiment_preset
    from budgetmix.training.experiment.design import gate_verdict

    six, four = (json.loads((root / d / "pilot.json").read_text()) for d in (MAIN, "pilot4"))
    rows = []
    for k in STEPS:
        a = next(c for c in six["curve"] if c["sft_steps"] == k)
        b = next(c for c in four["curve"] if c["sft_steps"] == k)
        rate = a["error_rate"]["rate"]
        gate = gate_verdict(experiment_preset("confirm"), rate)
        rows.append({
            "sft_steps": k,
            "sensitivity_design_chain": a["sensitivity"]["sensitivity"],
            "sensitivity_4_links": b["sensitivity"]["sensitivity"],
            "error_rate_design_chain": rate,
            "gate_passed": gate["passed"],
            "gate_reason": gate["reason"],
            "passes": a["sensitivity"]["sensitivity"] >= 0.5
            and b["sensitivity"]["sensitivity"] >= 0.5 and gate["passed"],
        })  # fmt: skip
    chosen = next((r for r in rows if r["passes"]), None)
    return {"rows": rows, "verdict": "RL" if chosen else "NO_RL", "chosen": chosen}


def at_utc(hhmm: str) -> dt.datetime:
    """Today's UTC time ``HH:MM``."""
    hh, mm = (int(x) for x in hhmm.split(":"))
    return dt.datetime.now(dt.UTC).replace(hour=hh, minute=mm, second=0, microsecond=0)


def watch(procs: list[subprocess.Popen[bytes]], out: Path, combine: list[str], stop_at: str,
          pause: float) -> None:  # fmt: skip
    """Until every process in ``procs`` ends: rebuild the summary (``combine``) every
    ``pause`` seconds, and copy it once to ``summary-prereg.*`` at ``stop_at`` (UTC HH:MM),
    the preregistered stopping time."""
    copied = False
    while True:
        done = all(p.poll() is not None for p in procs)
        if (out / "gate.json").exists():
            subprocess.run(combine, env=ENV, check=False)
        if not copied and dt.datetime.now(dt.UTC) >= at_utc(stop_at):
            if (out / "summary.json").exists():
                shutil.copy(out / "summary.json", out / "summary-prereg.json")
                shutil.copy(out / "summary.md", out / "summary-prereg.md")
            (out / "prereg-stop.txt").write_text(dt.datetime.now(dt.UTC).isoformat() + "\n")
            copied = True
        if done:
            return
        time.sleep(pause)


def confirm(root: Path, steps: int, rate: float, stop_at: str) -> None:
    out = root / "confirm"
    out.mkdir(parents=True, exist_ok=True)
    sets = ["--set", f"sft_steps={steps}", "--set", "seeds=8"]
    common = [*sets, "--error-rate", repr(rate), "--out", str(out)]
    procs = [_spawn([*common, "--base", str(b)], root / f"base{b}.log") for b in (0, 1)]
    combine = [*DESIGN, *sets, "--error-rate", repr(rate), "--out", str(out), "--combine", *EXTRA]
    watch(procs, out, combine, stop_at, PAUSE[0])
    failed = [b for b, p in enumerate(procs) if p.returncode]
    if failed:
        raise SystemExit(f"base(s) {failed} failed: see base<b>.log")


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--stop-at", required=True, help="UTC HH:MM of the preregistered summary")
    p.add_argument("--pilot-seeds", default="110,111", help="design-chain,4-link pilot SFT seeds")
    p.add_argument("--dry", action="store_true", help="tiny sizes, to check the pipeline")
    p.add_argument("--force-rl", action="store_true", help="with --dry: run RL whatever")
    args = p.parse_args()
    SEEDS[:] = args.pilot_seeds.split(",")
    if args.dry:
        EXTRA.extend(a for s in DRY for a in ("--set", s))
        STEPS[:], PAUSE[0] = [2, 4], 5.0
    root = Path(args.out)
    root.mkdir(parents=True, exist_ok=True)
    if not (root / "verdict.json").exists():
        pilots(root)
        (root / "verdict.json").write_text(json.dumps(decide(root), indent=2) + "\n")
    verdict = json.loads((root / "verdict.json").read_text())
    print(json.dumps(verdict, indent=2))
    if args.dry and args.force_rl:
        verdict = {
            "verdict": "RL",
            "chosen": {**verdict["rows"][0], "error_rate_design_chain": 0.2},
        }
    if verdict["verdict"] != "RL":
        return 0
    chosen = verdict["chosen"]
    confirm(root, int(chosen["sft_steps"]), float(chosen["error_rate_design_chain"]), args.stop_at)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
