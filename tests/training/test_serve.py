"""Serving a checkpoint: the controller-driven agent sees exactly what training rollouts saw."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from budgetmix import Budget, BudgetController, NotifyEveryTurn
from budgetmix.environment import Task
from budgetmix.policies.samplers import FixedBudget
from budgetmix.training.envs import FrozenLakeEnv
from budgetmix.training.rollouts.chat import ChatCodec
from budgetmix.training.rollouts.generation import ModelGenerator
from budgetmix.training.rollouts.rollout import EpisodeSpec, RolloutSettings, run_rollouts
from budgetmix.training.serving.serve import TrainedPolicyAgent

FMT = "v1-compact"
TURNS = 4


def _env() -> FrozenLakeEnv:
    return FrozenLakeEnv(map_name="4x4", slippery=False)


def _controller_episode(agent: TrainedPolicyAgent, seed: int) -> list[str]:
    env = _env()
    agent.start(env, seed)
    observation = env.reset(seed)
    actions: list[str] = []
    controller = BudgetController(Budget(turns=TURNS), notice=NotifyEveryTurn(FMT))
    with controller.episode() as ep:
        for turn in ep.turns():
            action = agent.act(observation, turn.notice, None)
            actions.append(action)
            result = env.step(action)
            observation = result.observation
            if result.done:
                ep.finish(success=result.success)
                break
    return actions


def _ends_every_response(model: Any, eos: int) -> None:
    """An untrained model never emits EOS; bias it so every response closes (and the
    episode runs several turns of invalid actions, each with a new notice)."""

    def hook(module: Any, inputs: Any, output: Any) -> Any:
        output[..., eos] += 1e4
        return output

    model.lm_head.register_forward_hook(hook)


def test_controller_episode_matches_a_training_rollout_token_for_token(
    tokenizer: Any, tiny_model: Any
) -> None:
    _ends_every_response(tiny_model, tokenizer.eos_token_id)
    task = Task(task_id="fl", make_env=_env, seed=3)
    generator = ModelGenerator(
        tiny_model,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        temperature=0.0,
    )
    settings = RolloutSettings(notice_format=FMT, max_new_tokens=6, token_check="strict")
    draw = FixedBudget(TURNS).sample(random.Random(0))
    (rollout,) = run_rollouts(
        [EpisodeSpec(task=task, budget=draw, group=0)], generator, ChatCodec(tokenizer), settings
    )

    agent = TrainedPolicyAgent(tiny_model, tokenizer, temperature=0.0, max_new_tokens=6)
    actions = _controller_episode(agent, seed=3)

    assert rollout.num_turns == TURNS  # every turn ran: notices of all turns are compared
    assert actions[: rollout.num_turns] == [s.action for s in rollout.steps]
    training_ids = list(rollout.prompt_ids) + list(rollout.response_ids)
    served = agent._ids or []
    n = min(len(served), len(training_ids))
    assert n > len(rollout.prompt_ids)
    assert served[:n] == training_ids[:n]


def test_from_pretrained_round_trip_and_bad_options(
    tmp_path: Path, tokenizer: Any, tiny_model: Any
) -> None:
    tiny_model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    loaded = TrainedPolicyAgent.from_pretrained(tmp_path, max_new_tokens=6)
    in_memory = TrainedPolicyAgent(tiny_model, tokenizer, max_new_tokens=6)
    assert _controller_episode(loaded, seed=1) == _controller_episode(in_memory, seed=1)
    from budgetmix import ConfigError

    with pytest.raises(ConfigError, match="temperature"):
        TrainedPolicyAgent(tiny_model, tokenizer, temperature=-1.0)
    with pytest.raises(ConfigError, match="max_new_tokens"):
        TrainedPolicyAgent(tiny_model, tokenizer, max_new_tokens=0)


def _flip_tensor_byte(path: Path) -> None:
    """Flip one byte in the middle of a safetensors file's tensor data (header intact)."""
    import struct

    raw = bytearray(path.read_bytes())
    (header_len,) = struct.unpack("<Q", raw[:8])
    raw[8 + header_len + (len(raw) - 8 - header_len) // 2] ^= 0x40
    path.write_bytes(bytes(raw))


def test_serving_loaders_verify_a_trained_models_manifest(tmp_path: Path) -> None:
    from budgetmix.exceptions import CheckpointError
    from budgetmix.training.config import preset
    from budgetmix.training.serving.serve import chat_model
    from budgetmix.training.trainer import train

    small = {"sft_steps": 1, "steps": 0, "sft_batch": 4, "progress": False}
    final = train(preset("echo-tiny", output_dir=str(tmp_path), **small)).final_model_dir
    assert final is not None and (final / "manifest.json").is_file()
    TrainedPolicyAgent.from_pretrained(final)  # intact: loads
    _flip_tensor_byte(final / "model.safetensors")  # same size, different weights
    with pytest.raises(CheckpointError, match=r"model\.safetensors"):
        TrainedPolicyAgent.from_pretrained(final)
    with pytest.raises(CheckpointError, match=r"model\.safetensors"):
        chat_model(final)


def test_serving_a_missing_directory_names_it(tmp_path: Path) -> None:
    from budgetmix import ConfigError
    from budgetmix.training.serving.serve import chat_model

    with pytest.raises(ConfigError, match="nowhere"):
        TrainedPolicyAgent.from_pretrained(tmp_path / "nowhere")
    with pytest.raises(ConfigError, match="nowhere"):
        chat_model(tmp_path / "nowhere")
