"""The GPU bench's paths, one per process (bench.py ``--phase NAME``); needs CUDA, vLLM and TRL."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from budgetmix.policies.samplers import BudgetMix
from budgetmix.training.envs import env_tasks
from budgetmix.training.rollouts.chat import ChatCodec
from budgetmix.training.rollouts.generation import TokenGenerator
from budgetmix.training.rollouts.rollout import EpisodeSpec, run_rollouts
from gpu_server import (  # bench/gpu/, on sys.path
    episode_specs,
    model_generator,
    trl_server,
    vllm_server,
)
from gpu_server import settings as _settings

ENV_KWARGS = {"letters": "abcd", "min_len": 1, "max_len": 3}


def _specs(args: Any) -> list[EpisodeSpec]:
    return episode_specs(args, "echo", ENV_KWARGS)


def _timed_rollouts(gen: TokenGenerator, codec: ChatCodec, args: Any) -> dict[str, Any]:
    """One warm-up batch, then three timed ones; median seconds."""
    run_rollouts(_specs(args), gen, codec, _settings(args))
    times, tokens, turns = [], 0, 0
    for _ in range(3):
        t0 = time.perf_counter()
        rollouts = run_rollouts(_specs(args), gen, codec, _settings(args))
        times.append(time.perf_counter() - t0)
        tokens = sum(r.sampled_tokens for r in rollouts)
        turns = sum(r.num_turns for r in rollouts)
    seconds = statistics.median(times)
    return {
        "rollout_tokens_per_s": tokens / seconds,
        "sampled_tokens": tokens,
        "episodes": len(rollouts),
        "mean_turns": turns / len(rollouts),
        "seconds": seconds,
    }


def inprocess(args: Any) -> dict[str, Any]:
    """budgetmix's own sampler on the GPU (transformers model, KV cache kept across turns)."""
    gen, codec = model_generator(args)
    return _timed_rollouts(gen, codec, args)


def vllm_engine(args: Any) -> dict[str, Any]:
    """The same rollouts, every turn sampled by ``vllm.LLM`` (prefix cache across turns)."""
    from budgetmix.training.engines.trl_vllm import EngineGenerator, llm_completer
    from transformers import AutoConfig, AutoTokenizer
    from vllm import LLM

    tok = AutoTokenizer.from_pretrained(args.model_dir)
    codec = ChatCodec(tok, eos_token_ids=AutoConfig.from_pretrained(args.model_dir).eos_token_id)
    llm = LLM(
        model=str(args.model_dir),
        gpu_memory_utilization=args.gpu_memory,
        max_model_len=4096,
        seed=0,
        enable_prefix_caching=True,
    )
    sampling = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0}
    complete = llm_completer(llm, stop_token_ids=codec.stop_token_ids, sampling=sampling)
    return _timed_rollouts(
        EngineGenerator(complete, stop_token_ids=codec.stop_token_ids), codec, args
    )


def _grpo_config(args: Any, out: str, completion: int, server_base_url: str | None = None) -> Any:
    """TRL's config: vLLM colocate, or server mode against ``server_base_url``."""
    import trl

    mode: dict[str, Any] = {"vllm_mode": "colocate"}
    if server_base_url is not None:
        mode = {"vllm_mode": "server", "vllm_server_base_url": server_base_url}
    return trl.GRPOConfig(
        output_dir=out,
        use_vllm=True,
        **mode,
        vllm_gpu_memory_utilization=args.gpu_memory,
        vllm_max_model_length=4096,
        per_device_train_batch_size=args.groups * args.group_size,
        num_generations=args.group_size,
        max_completion_length=completion,
        max_steps=args.trl_steps,
        learning_rate=1e-6,
        bf16=True,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        seed=0,
    )


def _step_rate(trainer: Any) -> float:
    times = [h["step_time"] for h in trainer.state.log_history if "step_time" in h]
    return 1.0 / statistics.median(times[1:] or times)


def trl_budgetmix(args: Any, server_base_url: str | None = None) -> dict[str, Any]:
    """TRL's GRPOTrainer (vLLM colocate, or server mode at ``server_base_url``) fed by our
    multi-turn ``rollout_func``."""
    import datasets
    import trl
    from budgetmix.training.engines.trl_adapter import budget_reward, make_rollout_func
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(args.model_dir)
    tasks = env_tasks("echo", range(args.groups), ENV_KWARGS)
    inner = make_rollout_func(tasks, BudgetMix(ceiling=args.ceiling), tok, settings=_settings(args))
    spent = {"seconds": [], "tokens": []}

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        t0 = time.perf_counter()
        out = inner(prompts, trainer)
        spent["seconds"].append(time.perf_counter() - t0)
        spent["tokens"].append(sum(sum(m) for m in out["env_mask"]))
        return out

    with tempfile.TemporaryDirectory() as out:
        trainer = trl.GRPOTrainer(
            model=str(args.model_dir),
            reward_funcs=budget_reward,
            args=_grpo_config(args, out, args.max_new_tokens * args.ceiling, server_base_url),
            train_dataset=datasets.Dataset.from_dict({"prompt": [t.task_id for t in tasks] * 8}),
            processing_class=tok,
            rollout_func=rollout_func,
        )
        trainer.train()
    secs, toks = spent["seconds"][1:] or spent["seconds"], spent["tokens"][1:] or spent["tokens"]
    return {
        "rollout_tokens_per_s": sum(toks) / sum(secs),
        "steps_per_s": _step_rate(trainer),
        "sampled_tokens": toks[-1],
        "note": "multi-turn, weights synced by TRL each step",
    }


def trl_native(args: Any) -> dict[str, Any]:
    """TRL's GRPOTrainer with its own single-turn vLLM generation, same model and batch."""
    import datasets
    import trl
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(args.model_dir)
    prompts = []
    for task in env_tasks("echo", range(args.groups), ENV_KWARGS):
        env = task.make_env()
        first = env.reset(task.seed)
        prompts.append(
            [{"role": "system", "content": env.instructions()}, {"role": "user", "content": first}]
        )
    spent = {"seconds": [], "tokens": []}

    def length_parity(completions: list[Any], **_: Any) -> list[float]:
        return [float(len(str(c)) % 2) for c in completions]  # any reward: throughput only

    with tempfile.TemporaryDirectory() as out:
        trainer = trl.GRPOTrainer(
            model=str(args.model_dir),
            reward_funcs=length_parity,
            args=_grpo_config(args, out, args.max_new_tokens * args.ceiling),
            train_dataset=datasets.Dataset.from_dict({"prompt": prompts * 8}),
            processing_class=tok,
        )
        vg, real = trainer.vllm_generation, trainer.vllm_generation.generate

        def generate(*a: Any, **k: Any) -> Any:
            t0 = time.perf_counter()
            result = real(*a, **k)
            spent["seconds"].append(time.perf_counter() - t0)
            spent["tokens"].append(sum(len(c) for c in result[1]))
            return result

        vg.generate = generate
        trainer.train()
    secs, toks = spent["seconds"][1:] or spent["seconds"], spent["tokens"][1:] or spent["tokens"]
    return {
        "rollout_tokens_per_s": sum(toks) / sum(secs),
        "steps_per_s": _step_rate(trainer),
        "sampled_tokens": toks[-1],
        "note": "single-turn completions (TRL's own path)",
    }


PHASES = {
    "inprocess": inprocess,
    "vllm": vllm_engine,
    "trl_budgetmix": trl_budgetmix,
    "trl_native": trl_native,
    "vllm_server": vllm_server,
    "trl_server": trl_server,
}


def run_phase(name: str, args: Any) -> dict[str, Any]:
    """Run the path ``name`` with the bench's arguments; its measurements."""
    args.model_dir = Path(args.model_dir)
    return PHASES[name](args)
