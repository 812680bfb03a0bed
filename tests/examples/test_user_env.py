"""examples/user_env.py: a user's tool environment, recorded under the controller, trained
(SFT on the recordings, then RL) on a tiny checkpoint of its own, and deployed again."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from budgetmix import Budget, BudgetController, EpisodeStatus, NotifyEveryTurn
from budgetmix.adapters import run_agent
from budgetmix.adapters.testing import ScriptedModel

ROOT = Path(__file__).resolve().parents[2]
FORMAT = "v1-compact"
TURNS = 8


@pytest.fixture
def user_env(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    monkeypatch.delitem(sys.modules, "user_env", raising=False)
    import user_env

    return user_env


def _controller() -> BudgetController:
    # a trained model is deployed with its notice kept in the observation (docs/layout.md)
    return BudgetController(
        Budget(turns=TURNS), notice=NotifyEveryTurn(format=FORMAT, placement="observation")
    )


def _deploy(model: Any, env: Any, seed: int) -> Any:
    task = env.reset(seed)
    tools = env.controller_tools()
    return run_agent(model, tools, task, _controller(), system=env.instructions(), judge=env.judge)


def test_the_example_is_short_and_labels_mistakes_and_recoveries(user_env: Any) -> None:
    assert len((ROOT / "examples" / "user_env.py").read_text().splitlines()) <= 60
    env = user_env.Counter()
    env.reset(0)
    refused = env.call_tool("add", '{"amount": 5}')
    assert (refused.label.mistake, refused.label.valid) == ("env_action_failed", True)
    assert env.call_tool("add", '{"amount": 3}').label.progress
    bad = env.call_tool("add", '{"amount": "3"}')
    assert bad.label.mistake == "invalid_tool_arguments" and not bad.label.valid
    env.reset(1)
    run = _deploy(ScriptedModel(user_env.demonstration(env)), env, 1)
    assert run.success and run.result.status is EpisodeStatus.SUCCESS
    assert [m.kind for m in run.result.mistakes] == ["env_action_failed"]  # refused add, as trained
    # 4 = mistake, 3, 2, submit: the submit's result ends the episode, as in training
    assert len(run.result.recoveries) == 1 and run.turns_used == 4
    assert run.messages[-1].role == "tool" and run.output == "Correct."


@pytest.mark.slow
def test_recorded_trained_and_deployed_under_the_controller(user_env: Any, tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    sys.path.insert(0, str(ROOT / "tests" / "training"))
    from _layout_fixtures import build_bpe_tokenizer, save_tiny_checkpoint
    from budgetmix.training import TrainConfig, train
    from budgetmix.training.data.recordings import episode_record, read_episodes, write_episodes
    from budgetmix.training.serving.serve import chat_model

    # 1. the team's own checkpoint: a locally trained BPE, Qwen2.5's template, a tiny Qwen2
    checkpoint = tmp_path / "base"
    save_tiny_checkpoint("qwen", build_bpe_tokenizer("qwen"), checkpoint)
    # 2. episodes recorded under the controller (a scripted policy stands in for the model)
    env = user_env.Counter()
    records = []
    for seed in range(3):
        env.reset(seed)
        run = _deploy(ScriptedModel(user_env.demonstration(env)), env, seed)
        assert run.success
        records.append(episode_record(run, env.controller_tools(), notice_placement="observation"))
    episodes = write_episodes(tmp_path / "episodes.jsonl", records)
    assert read_episodes(episodes) == records
    # 3. SFT on the recordings, then an RL step on the environment itself
    config = TrainConfig(
        model_path=str(checkpoint),
        env="user_env:Counter",
        sft_data=str(episodes),
        sft_steps=80,
        sft_batch=3,
        sft_lr=1e-2,
        steps=1,
        groups_per_step=1,
        group_size=2,
        sampler={"kind": "fixed", "turns": TURNS},
        notice_format=FORMAT,
        max_new_tokens=32,
        max_total_tokens=4096,
        output_dir=str(tmp_path / "run"),
        progress=False,
    )
    result = train(config)
    phases = [r["phase"] for r in result.metrics]
    assert phases == ["sft"] * 80 + ["rl"]
    losses = [r["sft_loss"] for r in result.metrics if r["phase"] == "sft"]
    assert losses[-1] < losses[0] / 50  # measured: 6.6 -> 0.02
    assert result.final_model_dir is not None
    trained_on = json.loads((result.final_model_dir / "training_env.json").read_text())
    assert trained_on["env"] == "user_env:Counter"
    # 4. the trained checkpoint deployed under the controller with the env's own tools: it
    # plays the demonstrated pattern (a refused add 5, a recovery, adds, submit)
    # within the budget, and the controller records its turns, mistake and recovery. (Whether
    # it reaches the target is not asserted: in 80 steps the tiny model learns the pattern,
    # not to read the target.)
    model = chat_model(result.final_model_dir, max_new_tokens=48)
    run = _deploy(model, env, 0)
    assert run.result.limits["turns"] == TURNS and 1 <= run.turns_used <= TURNS
    replies = [m for m in run.messages if m.role == "assistant"]
    assert len(replies) == run.turns_used == run.result.used["turns"]
    calls = [c for m in replies for c in m.tool_calls]
    assert [c.name for c in calls][:1] == ["add"] and calls[0].arguments == '{"amount": 5}'
    assert {c.name for c in calls} <= {"add", "submit"}
    assert [m.kind for m in run.result.mistakes] == ["env_action_failed"]
    assert len(run.result.recoveries) == 1
    assert run.result.status in (EpisodeStatus.SUCCESS, EpisodeStatus.FAILED)
