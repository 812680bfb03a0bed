"""TRL's GRPOTrainer trains one step on budget-aware multi-turn rollouts via rollout_func."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from budgetmix.policies.samplers import BudgetMix
from budgetmix.training.engines.trl_adapter import budget_reward, make_rollout_func
from budgetmix.training.envs import env_tasks
from budgetmix.training.rollouts.chat import ChatCodec
from budgetmix.training.rollouts.generation import ScriptedGenerator
from budgetmix.training.rollouts.rollout import RolloutSettings
from budgetmix.training.toy import echo_agent

pytestmark = pytest.mark.slow  # end to end: outside the unit loop (-m "not slow")

trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")


def _one_step(out: Path) -> Any:
    """One GRPO step on the CPU: 2 prompts x 4 generations, a large learning rate."""
    return trl.GRPOConfig(
        output_dir=str(out),
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=512,
        max_steps=1,
        learning_rate=1e-2,
        report_to="none",
        use_cpu=True,
        logging_steps=1,
        save_strategy="no",
        bf16=False,
        seed=0,
        disable_tqdm=True,
    )


def test_grpo_trainer_step_with_env_mask(
    tmp_path: Path, tokenizer: Any, tiny_model: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    tasks = env_tasks("echo", range(4), {})
    settings = RolloutSettings(max_new_tokens=4, notice_format="v1-compact", token_check="strict")
    inner = make_rollout_func(
        tasks,
        BudgetMix(ceiling=4),
        tokenizer,
        settings=settings,
        generator_factory=lambda model: ScriptedGenerator(echo_agent(0.5, seed=1), tokenizer),
    )
    seen: list[tuple[list[Any], dict[str, list[Any]]]] = []

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        out = inner(prompts, trainer)
        seen.append((prompts, out))
        return out

    before = {k: v.clone() for k, v in tiny_model.state_dict().items()}
    trainer = trl.GRPOTrainer(
        model=tiny_model,
        reward_funcs=budget_reward,
        args=_one_step(tmp_path),
        train_dataset=datasets.Dataset.from_dict({"prompt": [t.task_id for t in tasks]}),
        processing_class=tokenizer,
        rollout_func=rollout_func,
    )
    trainer.train()
    assert trainer.state.global_step == 1
    prompts, out = seen[0]
    assert len(prompts) == 8 and prompts[0] == prompts[3]  # TRL repeats each prompt per group
    for ids, mask, lps in zip(out["completion_ids"], out["env_mask"], out["logprobs"], strict=True):
        assert len(ids) == len(mask) == len(lps)
    assert any(0 in m for m in out["env_mask"])  # multi-turn: environment tokens are masked out
    # groups of identical prompts share one budget ("shared")
    assert out["budget_turns"][0:4] == [out["budget_turns"][0]] * 4
    logged = trainer.state.log_history[0]
    model_tokens = sum(sum(m) for m in out["env_mask"]) / len(out["env_mask"])
    assert logged["completions/mean_length"] == pytest.approx(model_tokens)
    assert logged["reward"] == pytest.approx(sum(out["budget_reward"]) / 8)
    changed = any(not torch.equal(before[k], v) for k, v in tiny_model.state_dict().items())
    assert changed == (len(set(out["budget_reward"])) > 1)


def _trl_vllm_client(base_url: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """TRL's own ``VLLMClient`` on ``base_url``; its constructor's check that the vllm package
    is importable is lifted (vLLM needs a GPU), nothing else is changed."""
    from trl.generation import vllm_client

    monkeypatch.setattr(vllm_client, "is_vllm_available", lambda *a, **k: True)
    return vllm_client.VLLMClient(base_url=base_url, connection_timeout=5)


def _served_spans(rollout: dict[str, Any], log: list[dict[str, Any]]) -> int:
    """Check each sampled span of a rollout is what the server returned for the context
    before it (ids and log-probs); returns the number of spans."""
    prompt, ids, mask, lps = rollout["prompt"], rollout["ids"], rollout["mask"], rollout["lps"]
    spans, i = 0, 0
    while i < len(ids):
        if not mask[i]:
            i += 1
            continue
        context = prompt + ids[:i]
        served = [
            e
            for e in log
            if e["prompt"] == context and ids[i : i + len(e["ids"])] == e["ids"]
        ]
        assert served, f"no server answer for the context and ids at position {i}"
        span = served[0]["ids"]
        assert all(mask[i : i + len(span)])
        assert lps[i : i + len(span)] == pytest.approx(served[0]["logprobs"])
        spans, i = spans + 1, i + len(span)
    return spans


def _ends_turns_often(model: Any, end_of_turn: int) -> None:
    """Give the untrained policy a +3 bias on its end-of-turn logit, so that its episodes
    last several turns instead of one reply cut at max_new_tokens."""
    import torch

    head = model.get_output_embeddings()
    biased = torch.nn.Linear(head.in_features, head.out_features, bias=True)
    biased.weight = head.weight
    with torch.no_grad():
        biased.bias.zero_()
        biased.bias[end_of_turn] = 3.0
    model.set_output_embeddings(biased)


def test_use_vllm_samples_every_turn_through_trls_vllm_client(
    tmp_path: Path, tokenizer: Any, tiny_model: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GRPO step whose multi-turn rollouts were sampled by a server through TRL's VLLMClient.

    TRL's ``VLLMGeneration`` (which needs vLLM to be built) is stood in by the attributes
    the adapter reads: its mode, TRL's client and TRL's sampling settings; the trainer
    keeps ``use_vllm`` off so TRL does not sync weights into a vLLM it never built (the
    loopback server samples from the trainer's own model object). Weight sync and
    colocate mode run in bench/gpu/.
    """
    from types import SimpleNamespace

    from _vllm_wire import VLLMWireServer

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    _ends_turns_often(tiny_model, ChatCodec(tokenizer).eos_token_id)
    tasks = env_tasks("echo", range(4), {})
    settings = RolloutSettings(max_new_tokens=4, notice_format="v1-compact", token_check="report")
    inner = make_rollout_func(
        tasks, BudgetMix(ceiling=4), tokenizer, settings=settings, use_vllm=True
    )
    seen: list[dict[str, list[Any]]] = []

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        seen.append(inner(prompts, trainer))
        return seen[-1]

    trainer = trl.GRPOTrainer(
        model=tiny_model,
        reward_funcs=budget_reward,
        args=_one_step(tmp_path),
        train_dataset=datasets.Dataset.from_dict({"prompt": [t.task_id for t in tasks]}),
        processing_class=tokenizer,
        rollout_func=rollout_func,
    )
    with VLLMWireServer(tiny_model, pad_token_id=int(tokenizer.pad_token_id)) as server:
        trainer.vllm_generation = SimpleNamespace(
            mode="server",
            vllm_client=_trl_vllm_client(server.base_url, monkeypatch),
            temperature=0.9,
            top_p=1.0,
            top_k=0,
            min_p=0.0,
            repetition_penalty=1.0,
            generation_kwargs={},
        )
        trainer.train()
    assert trainer.state.global_step == 1
    out = seen[0]
    body = server.requests[0]
    assert body["temperature"] == 0.9 and body["logprobs"] == 0 and body["max_tokens"] == 4
    assert set(body["stop_token_ids"]) >= {int(tokenizer.eos_token_id)}
    spans = [
        _served_spans({"prompt": p, "ids": c, "mask": m, "lps": lp}, server.log)
        for p, c, m, lp in zip(
            out["prompt_ids"], out["completion_ids"], out["env_mask"], out["logprobs"], strict=True
        )
    ]
    assert len(spans) == 8 and max(spans) >= 2  # multi-turn: every turn went to the server
    assert sum(spans) == len(server.log)  # and nothing else did


def test_use_vllm_without_trls_vllm_is_a_clear_error(tokenizer: Any) -> None:
    from types import SimpleNamespace

    from budgetmix.exceptions import ConfigError
    from budgetmix.training.engines.trl_vllm import EngineGenerator, trl_vllm_generator

    tasks = env_tasks("echo", range(2), {})
    func = make_rollout_func(tasks, BudgetMix(ceiling=4), tokenizer)  # follows the trainer
    unwrap = SimpleNamespace(unwrap_model=lambda m: m)
    trainer = SimpleNamespace(accelerator=unwrap, model=None, use_vllm=True)
    with pytest.raises(ConfigError, match="GRPOConfig\\(use_vllm=True\\)"):
        func([tasks[0].task_id], trainer)
    colocate = SimpleNamespace(mode="colocate", enable_sleep_mode=True)
    with pytest.raises(ConfigError, match="vllm_enable_sleep_mode"):
        trl_vllm_generator(SimpleNamespace(vllm_generation=colocate), stop_token_ids=[1])
    odd = SimpleNamespace(vllm_generation=SimpleNamespace(mode="remote"))
    with pytest.raises(ConfigError, match="server or colocate"):
        trl_vllm_generator(odd, stop_token_ids=[1])
    request = [SimpleNamespace(context_ids=[3])]

    def engine(answer: Any) -> EngineGenerator:
        return EngineGenerator(lambda prompts, k: [answer], stop_token_ids=[1])

    with pytest.raises(ConfigError, match="at most 2 new tokens"):
        engine(([5, 5, 5], [[0.0]] * 3, [[5]] * 3)).generate(request, 2)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="no log-prob for sampled id 5"):
        engine(([5, 1], [[-0.5], [-0.1]], [[7], [1]])).generate(request, 2)  # type: ignore[arg-type]
    ranked = engine(([5, 1], [[-2.0, -0.5], [-0.1]], [[6, 5], [1]]))
    (gen,) = ranked.generate(request, 2)  # type: ignore[arg-type]
    assert gen.ids == (5, 1) and gen.logprobs == (-0.5, -0.1) and gen.stopped
    (cut,) = engine(([5, 5], [[-0.5], [-0.2]], [[5], [5]])).generate(request, 2)  # type: ignore[arg-type]
    assert not cut.stopped  # no stop id at the end: cut at max_new_tokens


def test_a_non_main_process_opens_its_own_client_on_the_server(
    tokenizer: Any, tiny_model: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TRL gives only its main process a client; another rank gets one on the same URL."""
    from types import SimpleNamespace

    from _vllm_wire import VLLMWireServer
    from budgetmix.training.engines.trl_vllm import trl_vllm_generator
    from budgetmix.training.rollouts.generation import GenerationRequest
    from trl.generation import vllm_client

    monkeypatch.setattr(vllm_client, "is_vllm_available", lambda *a, **k: True)
    codec = ChatCodec(tokenizer)
    with VLLMWireServer(tiny_model, pad_token_id=int(tokenizer.pad_token_id)) as server:
        vg = SimpleNamespace(mode="server", vllm_client=None, server_base_url=server.base_url)
        vg.server_timeout = 5
        engine = trl_vllm_generator(SimpleNamespace(vllm_generation=vg), stop_token_ids=[1, 2])
        assert isinstance(vg.vllm_client, vllm_client.VLLMClient)  # kept for later steps
        (task,) = env_tasks("echo", [0], {})
        request = GenerationRequest(
            context_ids=codec.encode("hi"),
            env=task.make_env(),
            message="",
            state=None,  # type: ignore[arg-type]
        )
        (gen,) = engine.generate([request], 3)
    assert list(gen.ids) == server.log[0]["ids"] and len(gen.ids) <= 3
    assert server.requests[0]["stop_token_ids"] == [1, 2]
