"""GPU bench: multi-turn rollout tokens/s and GRPO steps/s with vLLM, beside TRL's own path.

    python bench/gpu/bench.py --out bench/gpu/results          # what run.sh runs
    python bench/gpu/bench.py --out DIR --prepare-only         # CPU: model + tokenizer only

One small public-architecture model (bench/gpu/gpu_model.py: Qwen2 from config, random
weights, a BPE tokenizer trained here), warm-started with ``--sft-steps`` budgetmix
SFT steps on the ``echo`` environment so that its episodes last several turns, then
one batch of ``--groups x --group-size`` episodes under BudgetMix budgets, each
path in a fresh process (one vLLM engine per process):

* ``budgetmix in-process``: :class:`~budgetmix.training.rollouts.generation.ModelGenerator`
  on the GPU (transformers, KV cache across turns), the reference;
* ``budgetmix + vLLM``: the same rollouts, every turn sampled by ``vllm.LLM``
  (:func:`~budgetmix.training.engines.trl_vllm.llm_completer`, prefix cache across turns);
* ``TRL GRPOTrainer + budgetmix rollout_func (vLLM colocate)``: ``use_vllm=True``,
  our ``rollout_func`` sampling through TRL's engine (weights synced by TRL);
* ``TRL GRPOTrainer, its own vLLM generation (colocate)``: TRL's single-turn path
  on the same model, prompts (each task's first observation) and batch, one
  completion of up to ``max_new_tokens x ceiling`` tokens.

Rollout tokens/s counts sampled tokens only; steps/s is the median over the steps
after the first (engine warm-up). Writes ``results.json`` and ``results.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PATHS = {
    "inprocess": "budgetmix in-process (transformers)",
    "vllm": "budgetmix + vLLM (vllm.LLM)",
    "trl_budgetmix": "TRL GRPOTrainer + budgetmix rollout_func (vLLM colocate)",
    "trl_native": "TRL GRPOTrainer, its own vLLM generation (colocate)",
    "vllm_server": "budgetmix ServerRollouts + vllm serve (tool env)",
    "trl_server": "TRL GRPOTrainer + budgetmix rollout_func (vLLM server mode)",
}


def build_parser() -> argparse.ArgumentParser:
    """The bench's flags (``phase`` runs one path in this process; run.sh never passes it)."""
    p = argparse.ArgumentParser(prog="bench/gpu/bench.py", description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True, help="folder for results.json/.md")
    p.add_argument("--model-dir", type=Path, help="default: <out>/model (made if absent)")
    p.add_argument("--groups", type=_positive, default=16)
    p.add_argument("--group-size", type=_positive, default=8)
    p.add_argument("--max-new-tokens", type=_positive, default=8)
    p.add_argument("--ceiling", type=_positive, default=4, help="BudgetMix turn ceiling")
    p.add_argument("--sft-steps", type=int, default=60, help="warm start; 0 keeps random weights")
    p.add_argument("--trl-steps", type=_positive, default=4, help="TRL steps (first is warm-up)")
    p.add_argument("--gpu-memory", type=float, default=0.35, help="vLLM gpu_memory_utilization")
    p.add_argument("--phase-timeout", type=_positive, default=400, help="seconds per path")
    p.add_argument("--device", default="cuda", help="device of the in-process path")
    p.add_argument("--prepare-only", action="store_true", help="make the model and stop (CPU)")
    p.add_argument("--phase", choices=sorted(PATHS), help=argparse.SUPPRESS)
    return p


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def prepare(args: argparse.Namespace) -> Path:
    """The bench model (made once, then reused) and its SFT warm start; returns the dir
    the paths load."""
    sys.path.insert(0, str(HERE))
    from gpu_model import make_model

    base = args.model_dir or args.out / "model"
    if not (base / "config.json").is_file():
        make_model(base)
    if args.sft_steps <= 0:
        return base
    warm = args.out / "warm"
    if not (warm / "final" / "config.json").is_file():
        from budgetmix.training import TrainConfig, train

        config = TrainConfig(
            env="echo",
            env_kwargs={"letters": "abcd", "min_len": 1, "max_len": 3},
            model_path=str(base),
            sampler={"kind": "budgetmix", "ceiling": args.ceiling},
            sft_steps=args.sft_steps,
            sft_lr=3e-3,
            steps=1,
            groups_per_step=2,
            group_size=2,
            max_new_tokens=args.max_new_tokens,
            output_dir=str(warm),
            progress=False,
        )
        train(config)
    return warm / "final"


def write_results(out: Path, rows: Sequence[dict[str, Any]], meta: dict[str, Any]) -> None:
    """``results.json`` (meta + rows) and ``results.md`` (a table, ratios to in-process)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"meta": meta, "rows": list(rows)}, indent=2))
    first = next((r for r in rows if r["path"] == "inprocess" and r.get("ok")), None)
    lines = [
        f"# GPU bench ({meta.get('gpu', 'unknown GPU')}, {meta.get('date', '')})",
        "",
        "| path | rollout tokens/s | x in-process | steps/s | sampled tokens | note |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        tps = r.get("rollout_tokens_per_s")
        # a row on other episodes (the server paths' tool environment) brings its own
        ref = r.get("reference_tokens_per_s") or (first or {}).get("rollout_tokens_per_s")
        ratio = f"{tps / ref:.1f}" if tps and ref else "-"
        steps = f"{r['steps_per_s']:.3f}" if r.get("steps_per_s") else "-"
        lines.append(
            f"| {PATHS[r['path']]} | {f'{tps:.0f}' if tps else '-'} | {ratio} | {steps} "
            f"| {r.get('sampled_tokens', '-')} | {r.get('note', '')} |"
        )
    settings = ", ".join(f"{k}={v}" for k, v in meta.get("settings", {}).items())
    lines += ["", f"Settings: {settings}.", f"Versions: {meta.get('versions', {})}."]
    (out / "results.md").write_text("\n".join(lines) + "\n")


def _meta(args: argparse.Namespace) -> dict[str, Any]:
    versions = {}
    for name in ("torch", "transformers", "vllm", "trl", "accelerate"):
        try:
            versions[name] = __import__(name).__version__
        except ImportError:
            versions[name] = None
    gpu = None
    if versions["torch"]:
        import torch

        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    keys = ("groups", "group_size", "max_new_tokens", "ceiling", "sft_steps", "trl_steps")
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "gpu": gpu,
        "python": platform.python_version(),
        "versions": versions,
        "settings": {k: getattr(args, k) for k in keys},
    }


def _run_phase(args: argparse.Namespace, name: str, model_dir: Path) -> dict[str, Any]:
    part = args.out / f"{name}.json"
    part.unlink(missing_ok=True)
    cmd = [sys.executable, str(Path(__file__)), "--phase", name, "--model-dir", str(model_dir)]
    cmd += [f"--out={args.out}", f"--groups={args.groups}", f"--group-size={args.group_size}"]
    cmd += [f"--max-new-tokens={args.max_new_tokens}", f"--ceiling={args.ceiling}"]
    cmd += [f"--trl-steps={args.trl_steps}", f"--gpu-memory={args.gpu_memory}"]
    cmd += [f"--device={args.device}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = proc.communicate(timeout=args.phase_timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()  # SIGTERM: the phase stops the servers it started (see main)
        try:
            output, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            output, _ = proc.communicate()
        (args.out / f"{name}.log").write_text(output)
        return {"path": name, "ok": False, "note": f"timed out after {args.phase_timeout} s"}
    if proc.returncode != 0 or not part.is_file():
        (args.out / f"{name}.log").write_text(output)
        return {"path": name, "ok": False, "note": f"failed, see {name}.log"}
    result = json.loads(part.read_text())
    if "skipped" in result:  # cannot run on this machine, and says why
        return {"path": name, "ok": True, "note": f"not run: {result['skipped']}"}
    return {"path": name, "ok": True, **result}


def main(argv: Sequence[str] | None = None) -> int:
    """Prepare, run every path in its own process, write the results; 0 when all ran."""
    args = build_parser().parse_args(argv)
    if args.phase:
        from gpu_phases import run_phase  # GPU code, imported only in a phase process
        from gpu_server import stop_on_sigterm

        stop_on_sigterm()  # a phase past its timeout stops the servers it started

        result = run_phase(args.phase, args)
        (args.out / f"{args.phase}.json").write_text(json.dumps(result))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    model_dir = prepare(args)
    if args.prepare_only:
        print(json.dumps({"model_dir": str(model_dir)}))
        return 0
    missing = [m for m in ("vllm", "trl") if not _importable(m)]
    if missing:
        print(f"bench/gpu: {', '.join(missing)} not installed: run bash bench/gpu/run.sh")
        return 2
    rows = [_run_phase(args, name, model_dir) for name in PATHS]
    write_results(args.out, rows, _meta(args))
    print((args.out / "results.md").read_text())
    return 0 if all(r["ok"] for r in rows) else 1


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


if __name__ == "__main__":
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    sys.path.insert(0, str(HERE))
    sys.exit(main())
