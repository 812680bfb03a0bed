"""The GPU bench's server paths: rollouts through ``vllm serve``, and TRL's server mode.

* ``vllm_server``: :class:`~budgetmix.training.serving.server_rollout.ServerRollouts` (the
  production loop: a BudgetController per episode, ``run_agent`` over ``openai.OpenAI``)
  against ``vllm serve`` in a process of its own on the same GPU, with vLLM's ids and
  log-probs (``return_token_ids``, ``--logprobs-mode processed_logprobs``) and its tool
  parser. The episodes are a tool environment's (``faulty_tools``: server rollouts play
  deployed tools), so the same batch is also rolled out in-process on this GPU as the
  reference of this row (``reference_tokens_per_s``).
* ``trl_server``: TRL's GRPOTrainer with ``vllm_mode="server"`` fed by budgetmix's
  ``rollout_func``, against ``trl vllm-serve``. TRL runs that server on a GPU of its own
  (its docs: server and trainer on separate CUDA devices; the weights move over NCCL,
  which takes one rank per device), so on one GPU the row says so and measures nothing.

:func:`served` starts a server command, waits for its health route and stops its whole
process group; the tests drive it and :func:`server_rollouts_rate` on a CPU against
:class:`~budgetmix.training.serving.openai_server.LocalOpenAIServer`.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from budgetmix.policies.samplers import BudgetMix
from budgetmix.training.envs import env_tasks
from budgetmix.training.rollouts.rollout import EpisodeSpec, RolloutSettings

#: The tool environment the server paths play (server rollouts need deployed tools).
SERVER_ENV = "faulty_tools"
SERVED_NAME = "policy"


def episode_specs(args: Any, env: str, kwargs: Mapping[str, Any]) -> list[EpisodeSpec]:
    """``groups x group_size`` episodes of ``env`` under BudgetMix budgets (seeded: every
    path and batch rolls out the same specs)."""
    rng = random.Random(0)
    sampler = BudgetMix(ceiling=args.ceiling)
    tasks = env_tasks(env, range(args.groups), kwargs)
    return [
        EpisodeSpec(task=t, budget=sampler.sample(rng), group=g)
        for g, t in enumerate(tasks)
        for _ in range(args.group_size)
    ]


def tool_specs(args: Any) -> list[EpisodeSpec]:
    """The server paths' episodes: :data:`SERVER_ENV`'s."""
    return episode_specs(args, SERVER_ENV, {})


def settings(args: Any) -> RolloutSettings:
    return RolloutSettings(max_new_tokens=args.max_new_tokens, max_total_tokens=4096)


def free_port() -> int:
    """A port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cli(name: str) -> str:
    """The console script ``name`` of this Python's environment (run.sh's venv is not
    activated), else ``name`` on PATH."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.is_file() else name


def vllm_serve_command(model_dir: Path, port: int, gpu_memory: float) -> list[str]:
    """``vllm serve`` as docs/training.md's server rollouts use it (weights from disk)."""
    return [
        cli("vllm"), "serve", str(model_dir),
        "--served-model-name", SERVED_NAME,
        "--host", "127.0.0.1", "--port", str(port),
        "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
        "--logprobs-mode", "processed_logprobs",
        "--gpu-memory-utilization", str(gpu_memory),
        "--max-model-len", "4096", "--enable-prefix-caching", "--seed", "0",
    ]  # fmt: skip


def trl_serve_command(model_dir: Path, port: int, gpu_memory: float) -> list[str]:
    """``trl vllm-serve`` for TRL's server mode."""
    return [
        cli("trl"), "vllm-serve", "--model", str(model_dir),
        "--host", "127.0.0.1", "--port", str(port),
        "--gpu-memory-utilization", str(gpu_memory), "--max-model-len", "4096",
    ]  # fmt: skip


def stop_on_sigterm() -> None:
    """Make SIGTERM unwind this process (``SystemExit``), so that :func:`served` stops the
    servers it started: bench.py sends it to a phase past its timeout."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


@contextlib.contextmanager
def served(
    command: Sequence[str],
    health: str,
    log: Path,
    *,
    timeout_s: float = 180.0,
    env: Mapping[str, str] | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``command`` (a server) in a process group of its own, output to ``log``, until
    GET ``health`` answers 200; stop the group on exit.

    Raises:
        RuntimeError: the server exited or did not answer within ``timeout_s`` (the
            message ends with the log's tail).
    """
    import httpx

    with log.open("wb") as out:
        proc = subprocess.Popen(
            list(command),
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                name = Path(command[0]).name
                raise RuntimeError(f"{name} exited with {proc.returncode}: {_tail(log)}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(health, timeout=2.0).status_code == 200:
                    break
            if time.monotonic() > deadline:
                name = Path(command[0]).name
                raise RuntimeError(f"{name} not healthy after {timeout_s:g} s: {_tail(log)}")
            time.sleep(0.5)
        yield proc
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the server's process group (its workers too, such as vLLM's engine core,
    also when the leader is gone already), SIGKILL what is left after 30 s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    with contextlib.suppress(ProcessLookupError):  # members that outlived the leader
        os.killpg(proc.pid, signal.SIGKILL)


def _tail(log: Path, chars: int = 2000) -> str:
    return log.read_text(errors="replace")[-chars:]


def server_rollouts_rate(base_url: str, model: str, args: Any) -> dict[str, Any]:
    """:func:`tool_specs` rolled out through ``base_url`` by ServerRollouts: one warm-up
    batch, then three timed ones (median seconds)."""
    from budgetmix.training.serving.server_rollout import ServerRollouts

    driver = ServerRollouts(
        base_url, model, settings=settings(args), max_parallel=args.groups * args.group_size
    )
    try:
        driver(tool_specs(args))
        times, rates, tokens, turns = [], [], 0, 0
        for _ in range(3):
            t0 = time.perf_counter()
            rows = driver(tool_specs(args))
            times.append(time.perf_counter() - t0)
            tokens = sum(r.sampled_tokens for r in rows)
            rates.append(tokens / times[-1])
            turns = driver.report.requests
    finally:
        driver.close()
    seconds = statistics.median(times)
    return {  # the median of the batches' rates, as inprocess_rate's
        "rollout_tokens_per_s": statistics.median(rates),
        "sampled_tokens": tokens,
        "episodes": driver.report.episodes,
        "mean_turns": turns / max(driver.report.episodes, 1),
        "split_episodes": driver.report.split_episodes,
        "seconds": seconds,
    }


def model_generator(args: Any) -> tuple[Any, Any]:
    """budgetmix's in-process sampler for ``args.model_dir`` on ``args.device`` (bf16 on a
    GPU; transformers model, KV cache kept across turns) and its chat codec."""
    import torch
    from budgetmix.training.rollouts.chat import ChatCodec
    from budgetmix.training.rollouts.generation import ModelGenerator
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(args.model_dir)
    dtype = torch.bfloat16 if args.device != "cpu" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=dtype).to(args.device)
    codec = ChatCodec.for_model(model, tok)
    gen = ModelGenerator(
        model,
        eos_token_id=codec.eos_token_id,
        stop_token_ids=codec.stop_token_ids,
        pad_token_id=int(tok.pad_token_id),
        batch_size=args.groups * args.group_size,
        generator=torch.Generator(device=args.device).manual_seed(0),
    )
    return gen, codec


def inprocess_rate(args: Any) -> float:
    """Sampled tokens/s of :func:`tool_specs` rolled out by :func:`model_generator`
    (warm-up, then the median of three batches)."""
    from budgetmix.training.rollouts.rollout import run_rollouts

    gen, codec = model_generator(args)
    run_rollouts(tool_specs(args), gen, codec, settings(args))
    rates = []
    for _ in range(3):
        t0 = time.perf_counter()
        rows = run_rollouts(tool_specs(args), gen, codec, settings(args))
        rates.append(sum(r.sampled_tokens for r in rows) / (time.perf_counter() - t0))
    return statistics.median(rates)


def vllm_server(args: Any) -> dict[str, Any]:
    """ServerRollouts against ``vllm serve`` on this GPU, beside in-process on the same
    episodes."""
    import gc

    import torch

    reference = inprocess_rate(args)  # first: its model is freed before vLLM starts
    gc.collect()  # the model sits in a reference cycle: collected here, not at return
    torch.cuda.empty_cache()
    port = free_port()
    command = vllm_serve_command(args.model_dir, port, args.gpu_memory)
    log = Path(args.out) / "vllm_server.serve.log"
    with served(command, f"http://127.0.0.1:{port}/health", log):
        row = server_rollouts_rate(f"http://127.0.0.1:{port}/v1", SERVED_NAME, args)
    ratio = row["rollout_tokens_per_s"] / reference
    return {
        **row,
        "reference_tokens_per_s": reference,
        "note": f"{SERVER_ENV}, {ratio:.2f}x in-process on the same episodes "
        f"({reference:.0f} tokens/s), mean turns {row['mean_turns']:.2f}",
    }


def trl_server(args: Any) -> dict[str, Any]:
    """TRL's GRPOTrainer in server mode (``trl vllm-serve`` on GPU 1, training on GPU 0)
    fed by budgetmix's ``rollout_func``; on one GPU, a row that says why it cannot run."""
    import torch

    if torch.cuda.device_count() < 2:
        return {
            "skipped": "TRL's server mode runs trl vllm-serve on a GPU of its own (server and "
            f"trainer on separate CUDA devices); this machine has {torch.cuda.device_count()}"
        }
    from gpu_phases import trl_budgetmix  # the colocate path's trainer, in server mode

    port = free_port()
    log = Path(args.out) / "trl_server.serve.log"
    command = trl_serve_command(args.model_dir, port, args.gpu_memory)
    health = f"http://127.0.0.1:{port}/health/"
    with served(command, health, log, env={"CUDA_VISIBLE_DEVICES": "1"}):
        row = trl_budgetmix(args, server_base_url=f"http://127.0.0.1:{port}")
    return {**row, "note": "multi-turn, TRL server mode (trl vllm-serve on GPU 1)"}
