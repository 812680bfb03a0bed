"""One episode-end rule and one grace-turn rule in training and deployment (issue 26 items
3 and 4), token for token, with an own checkpoint (byte-level BPE trained here, the official
Qwen2.5, Llama-3.1 and Qwen3 templates).

* The episode ends with the tool result that ends the task: a training rollout stops there,
  and so does ``run_agent`` (the environment's deployed tool returns ``EndEpisode``): the
  same turns, the same charge, no further model call. An episode solved on turn T of T is a
  success in both, and the whole last turn (its prompt and its sampled ids) is the same.
* A checkpoint is trained without a grace turn and records it (``grace_turn: false``):
  ``run_agent`` and the evaluator refuse to grant it one. The final turn of an episode the
  budget ends is the same in both.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from _layout_fixtures import (
    TEMPLATES,
    VALUES,
    LookupEnv,
    build_bpe_tokenizer,
    save_tiny_checkpoint,
)
from budgetmix import Budget, BudgetController, EpisodeStatus
from budgetmix.adapters import run_agent
from budgetmix.environment import Task
from budgetmix.evaluation import EvalConfig, Evaluator
from budgetmix.exceptions import ConfigError
from budgetmix.policies import NotifyEveryTurn
from budgetmix.policies.samplers import FixedBudget
from budgetmix.training.data.models import load_pretrained
from budgetmix.training.data.provenance import write_training_env
from budgetmix.training.envs.tool_env import ToolResult, env_tool
from budgetmix.training.rollouts.chat import ChatCodec
from budgetmix.training.rollouts.generation import Generation, GenerationRequest, ScriptedGenerator
from budgetmix.training.rollouts.rollout import EpisodeSpec, RolloutSettings, run_rollouts
from budgetmix.training.serving import serve

KEYS = ("alpha", "beta")


class AnswerEnv(LookupEnv):
    """Look up two values, then call ``answer``: its result ends the episode."""

    name = "lookup-answer"

    @env_tool
    def answer(self, value: int) -> ToolResult:
        """Give the sum as the final answer."""
        ok = value == sum(VALUES.values())
        return ToolResult(output="correct" if ok else "wrong", done=True, success=ok)


def _reply(req: GenerationRequest, reasoning: bool) -> dict[str, Any]:
    done = sum(m["role"] == "assistant" for m in req.messages)
    name, args = ("lookup", {"key": KEYS[done]}) if done < 2 else ("answer", {"value": 18})
    call = {"id": "x", "type": "function", "function": {"name": name, "arguments": args}}
    head = f"<think>\n{name}\n</think>\n\n" if reasoning else ""
    return {"role": "assistant", "content": head, "tool_calls": [call]}


class Recording(ScriptedGenerator):
    """The demonstrator (two lookups, then answer), recording every turn's ids."""

    def __init__(self, codec: ChatCodec) -> None:
        reasoning = "<think>" in codec.template.template  # Qwen3's template
        super().__init__(lambda req: _reply(req, reasoning), codec)
        self.contexts: list[list[int]] = []
        self.replies: list[list[int]] = []

    def generate(self, requests: Any, max_new_tokens: int) -> list[Generation]:
        out = super().generate(requests, max_new_tokens)
        self.contexts += [list(r.context_ids) for r in requests]
        self.replies += [list(g.ids) for g in out]
        return out


@pytest.fixture(scope="module", params=["qwen2.5", "llama3.1", "qwen3"])
def checkpoint(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    family = "llama" if request.param == "llama3.1" else "qwen"
    tokenizer = build_bpe_tokenizer(family)
    if request.param == "qwen3":
        tokenizer.chat_template = (TEMPLATES / "Qwen-Qwen3-0.6B.jinja").read_text()
    path = tmp_path_factory.mktemp(f"ckpt-{request.param}")
    save_tiny_checkpoint(family, tokenizer, path)
    # what the trainer records next to a model it wrote: the notice, parser, no grace
    codec = ChatCodec(tokenizer)
    write_training_env(
        path, "lookup-answer", {}, notice_format="v1",
        tool_call_format=codec.template.tool_call_format,
    )  # fmt: skip
    return path


def _training(path: Path, turns: int) -> tuple[Recording, Any]:
    model, tokenizer = load_pretrained(path)
    gen = Recording(ChatCodec.for_model(model, tokenizer))
    task = Task(task_id="answer-0", seed=0, make_env=AnswerEnv)
    spec = EpisodeSpec(task=task, budget=FixedBudget(turns).sample(random.Random(0)))
    settings = RolloutSettings(token_check="strict", max_new_tokens=64, max_total_tokens=4096)
    (rollout,) = run_rollouts([spec], gen, ChatCodec.for_model(model, tokenizer), settings)
    return gen, rollout


def _deployment(
    path: Path, replies: list[list[int]], turns: int, **options: Any
) -> tuple[list[list[int]], Any, AnswerEnv]:
    chat = serve.chat_model(path, max_new_tokens=64)
    fed: list[list[int]] = []
    real_send = chat.send

    def send(request: str) -> Any:
        fed.append(chat.encode_prompt(request))
        return real_send(request)._replace(new_ids=replies[len(fed) - 1])

    chat.send = send  # type: ignore[method-assign]
    env = AnswerEnv()
    task = env.reset(0)
    controller = BudgetController(
        Budget(turns=turns), notice=NotifyEveryTurn(placement="observation"), **options
    )
    run = run_agent(
        chat, env.controller_tools(), task, controller, system=env.instructions(), judge=env.judge
    )
    return fed, run, env


def _same(a: list[int], b: list[int], what: str) -> None:
    assert a == b, f"{what}: first difference at " + str(
        next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    )


def test_solved_on_turn_t_of_t_is_a_success_in_both_and_its_last_turn_is_the_same(
    checkpoint: Path,
) -> None:
    gen, rollout = _training(checkpoint, turns=3)
    assert (rollout.termination, rollout.success, rollout.reward) == ("success", True, 1.0)
    assert rollout.num_turns == 3 and len(gen.contexts) == 3
    fed, run, env = _deployment(checkpoint, gen.replies, turns=3)
    # the answer's result ends the deployed episode too: no 4th model call, no 4th charge
    assert run.status is EpisodeStatus.SUCCESS and run.success and env.success
    assert run.turns_used == 3 == run.result.used["turns"] and len(fed) == 3
    for turn, (deployed, trained) in enumerate(zip(fed, gen.contexts, strict=True), start=1):
        _same(deployed, trained, f"turn {turn}")
    # the whole last turn, token for token: its prompt and its sampled ids (the row's end)
    _same(fed[-1] + gen.replies[-1], list(rollout.prompt_ids + rollout.response_ids), "turn 3")
    assert run.messages[-1].role == "tool" and run.messages[-1].content == "correct"
    assert rollout.steps[-1].observation == "correct" and run.output == "correct"


def test_under_the_evaluator_the_checkpoint_ends_where_training_does(
    checkpoint: Path, tmp_path: Path
) -> None:
    from budgetmix.training.rollouts.sampler import Generation as SampledIds

    gen, _rollout = _training(checkpoint, turns=3)
    agent = serve.TrainedPolicyAgent.from_pretrained(checkpoint, max_new_tokens=64)
    fed: list[list[int]] = []

    def scripted(contexts: Any, max_new_tokens: int, episodes: Any = None) -> list[Any]:
        fed.append(list(contexts[0]))
        ids = tuple(gen.replies[len(fed) - 1])
        return [SampledIds(ids=ids, logprobs=(0.0,) * len(ids), stopped=True)]

    agent.generator.generate_ids = scripted  # type: ignore[method-assign]
    tasks = [Task(task_id="answer-0", seed=0, make_env=AnswerEnv)]
    config = EvalConfig(budgets=(3,), notice_format="v1", concurrency=1)
    (record,) = Evaluator(lambda: agent, tasks, config).run(tmp_path / "r.jsonl").records
    assert record.success and record.turns_used == 3 and len(fed) == 3
    for turn, (served, trained) in enumerate(zip(fed, gen.contexts, strict=True), start=1):
        _same(served, trained, f"turn {turn}")


def test_the_final_turn_of_a_spent_budget_is_the_same_and_grace_is_refused(
    checkpoint: Path, tmp_path: Path
) -> None:
    gen, rollout = _training(checkpoint, turns=2)
    assert rollout.termination == "budget_exhausted" and rollout.num_turns == 2
    fed, run, _env = _deployment(checkpoint, gen.replies, turns=2)
    assert run.status is EpisodeStatus.BUDGET_EXHAUSTED and len(fed) == 2
    for turn, (deployed, trained) in enumerate(zip(fed, gen.contexts, strict=True), start=1):
        _same(deployed, trained, f"turn {turn}")
    _same(fed[-1] + gen.replies[-1], list(rollout.prompt_ids + rollout.response_ids), "turn 2")
    # trained without a grace turn, recorded so: deployment refuses to grant one
    assert serve.chat_model(checkpoint).trained_grace_turn is False
    with pytest.raises(ConfigError, match="trained without a grace turn"):
        _deployment(checkpoint, gen.replies, turns=2, exhaustion="grace")
    agent = serve.TrainedPolicyAgent.from_pretrained(checkpoint)
    assert agent.trained_grace_turn is False
    tasks = [Task(task_id="answer-0", seed=0, make_env=AnswerEnv)]
    config = EvalConfig(budgets=(2,), policy={"exhaustion": "grace"})
    with pytest.raises(ConfigError, match=r"exhaustion.*trained without a grace turn"):
        Evaluator(lambda: agent, tasks, config)
    # deploying it with a grace turn on purpose: the documented opt-out
    chat = serve.chat_model(checkpoint, max_new_tokens=4)
    chat.trained_grace_turn = None
    env = AnswerEnv()
    controller = BudgetController(
        Budget(turns=1), notice=NotifyEveryTurn(placement="observation"), exhaustion="grace"
    )
    out = run_agent(chat, env.controller_tools(), env.reset(0), controller, judge=env.judge)
    assert out.turns_used == 1  # it ran (the untrained weights may answer at once)
