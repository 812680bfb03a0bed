"""Training throughput of the tiny preset: batched vs one-episode-at-a-time rollouts, vs TRL.

    .venv/bin/python bench/train_throughput.py [--repeats 5] [--threads 1] [--device cpu]

Setup: the ``echo-tiny`` preset's model is warm-started with ``--sft-steps``
SFT steps (so it answers in a few tokens and episodes run several turns),
then one batch of ``groups x group_size`` rollouts under BudgetMix budgets is
measured in four ways, each ``--repeats`` times (medians reported):

* ``batched``: all episodes of the batch step together (one forward per token
  for the whole batch, KV cache);
* ``sequential``: the same episodes rolled out one at a time;
* ``budgetmix GRPO step``: batched rollouts + old-logprob pass + one update;
* ``TRL GRPOTrainer step``: TRL 1.x's trainer on the same model and batch, fed
  by our ``rollout_func`` adapter (its own loss/update path).

Rollout tokens/s counts sampled (model) tokens only.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from typing import Any

import torch
from budgetmix.training.algorithms.objectives import (
    group_advantages,
    policy_loss,
    sequence_batch,
    token_logprobs,
)
from budgetmix.training.config import preset
from budgetmix.training.envs import env_tasks
from budgetmix.training.rollouts.chat import ChatCodec
from budgetmix.training.rollouts.generation import ModelGenerator
from budgetmix.training.rollouts.rollout import EpisodeSpec, Rollout, RolloutSettings, run_rollouts
from budgetmix.training.trainer import train


def _specs(cfg: Any, rng: random.Random) -> list[EpisodeSpec]:
    sampler = cfg.budget_sampler()
    tasks = env_tasks("echo", range(cfg.groups_per_step), cfg.env_kwargs)
    return [
        EpisodeSpec(task=t, budget=sampler.sample(rng), group=g)
        for g, t in enumerate(tasks)
        for _ in range(cfg.group_size)
    ]


def _generator(model: Any, tok: Any, seed: int, batch: int) -> ModelGenerator:
    return ModelGenerator(
        model,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        batch_size=batch,
        generator=torch.Generator().manual_seed(seed),
    )


def _update(model: Any, opt: Any, rollouts: list[Rollout], pad: int) -> None:
    adv = torch.tensor(group_advantages([r.reward for r in rollouts], [r.group for r in rollouts]))
    batch = sequence_batch(rollouts, pad)
    logp = token_logprobs(model, batch)  # one epoch, one minibatch: old = current (as the trainer)
    policy_loss(logp, logp.detach(), adv, batch.loss_mask).loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--sft-steps", type=int, default=40)
    ap.add_argument("--no-trl", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    work = tempfile.mkdtemp(prefix="bm-train-bench-")
    cfg = preset(
        "echo-tiny", sft_steps=args.sft_steps, steps=0, progress=False, output_dir=f"{work}/warm"
    )
    final = train(cfg).final_model_dir
    assert final is not None
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(final), local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(str(final), local_files_only=True)
    codec = ChatCodec(tok)
    settings = RolloutSettings(
        notice_format=cfg.notice_format,
        max_new_tokens=cfg.max_new_tokens,
        max_total_tokens=cfg.max_total_tokens,
    )
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    n = cfg.groups_per_step * cfg.group_size
    rows: dict[str, list[tuple[float, float, float]]] = {}  # name -> (seconds, tokens, turns)

    def record(name: str, seconds: float, rollouts: list[Rollout]) -> None:
        tokens = float(sum(r.sampled_tokens for r in rollouts))
        turns = sum(r.num_turns for r in rollouts) / len(rollouts)
        rows.setdefault(name, []).append((seconds, tokens, turns))

    for rep in range(args.repeats):
        specs = _specs(cfg, random.Random(rep))
        t = time.perf_counter()
        batched = run_rollouts(specs, _generator(model, tok, rep, n), codec, settings)
        record("rollout, batched", time.perf_counter() - t, batched)
        gen = _generator(model, tok, rep, 1)
        t = time.perf_counter()
        seq = [r for s in specs for r in run_rollouts([s], gen, codec, settings)]
        record("rollout, one episode at a time", time.perf_counter() - t, seq)
        t = time.perf_counter()
        step = run_rollouts(specs, _generator(model, tok, rep, n), codec, settings)
        _update(model, opt, step, tok.pad_token_id)
        record("budgetmix GRPO step (batched rollout + update)", time.perf_counter() - t, step)

    if not args.no_trl:
        rows.update(_trl_rows(model, tok, cfg, settings, args.repeats, work))

    params = sum(p.numel() for p in model.parameters()) / 1e6
    print(
        f"\nTiny preset `echo-tiny` ({params:.2f}M params), "
        f"batch {n} rollouts ({cfg.groups_per_step} groups x {cfg.group_size}), "
        f"torch threads {args.threads}, medians of {args.repeats}\n"
    )
    print("| path | seconds / batch | sampled tokens / s | updates / s | mean turns |")
    print("|---|---|---|---|---|")
    for name, vals in rows.items():
        sec = statistics.median(v[0] for v in vals)
        tps = statistics.median(v[1] / v[0] for v in vals)
        ups = f"{1 / sec:.2f}" if "step" in name else "-"
        turns = statistics.median(v[2] for v in vals)
        print(f"| {name} | {sec:.3f} | {tps:,.0f} | {ups} | {turns:.2f} |")


def _trl_rows(
    model: Any, tok: Any, cfg: Any, settings: RolloutSettings, repeats: int, work: str
) -> dict[str, list[tuple[float, float, float]]]:
    import datasets
    import trl
    from budgetmix.training.engines.trl_adapter import budget_reward, make_rollout_func

    tasks = env_tasks("echo", range(cfg.groups_per_step), cfg.env_kwargs)
    inner = make_rollout_func(tasks, cfg.budget_sampler(), tok, settings=settings)
    outs: list[dict[str, Any]] = []

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        out = inner(prompts, trainer)
        outs.append(out)
        return out

    n = cfg.groups_per_step * cfg.group_size
    args = trl.GRPOConfig(
        output_dir=f"{work}/trl",
        per_device_train_batch_size=n,
        num_generations=cfg.group_size,
        max_completion_length=cfg.max_total_tokens,
        max_steps=repeats + 1,
        learning_rate=cfg.lr,
        report_to="none",
        use_cpu=True,
        logging_steps=1,
        save_strategy="no",
        bf16=False,
        disable_tqdm=True,
        seed=0,
    )
    trainer = trl.GRPOTrainer(
        model=model,
        reward_funcs=budget_reward,
        args=args,
        train_dataset=datasets.Dataset.from_dict({"prompt": [t.task_id for t in tasks]}),
        processing_class=tok,
        rollout_func=rollout_func,
    )
    trainer.train()
    times = [h["step_time"] for h in trainer.state.log_history if "step_time" in h][1:]  # warm-up
    rows = []
    for sec, out in zip(times, outs[1:], strict=False):
        tokens = float(sum(sum(m) for m in out["env_mask"]))
        rows.append((sec, tokens, sum(out["num_turns"]) / len(out["num_turns"])))
    return {"TRL GRPOTrainer step (our rollout_func + TRL update)": rows}


if __name__ == "__main__":
    main()
