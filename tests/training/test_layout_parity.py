"""Training = deployment, token for token (issue 17 item 1).

A 3-turn tool-call episode with an ML team's own checkpoint (a byte-level BPE trained
here, the official Qwen2.5, Llama-3.1 or Qwen3 chat template, a tiny Qwen2 / Llama model
saved with ``save_pretrained``) is played twice:

* as a training rollout (scripted demonstrator, token-in/token-out ids);
* through the controller's chat path: ``serve.chat_model(DIR)`` (a LocalChatModel) under
  ``run_agent`` with the environment's tools and notice placement ``"observation"``.

The ids the model is fed at each turn must be identical. The deployed model's generation
is replaced by the demonstrator's canonical reply ids (the layout is under test, not the
weights); everything else - rendering, tokenizing, parsing the reply, the loop's history,
the notice placement - is the real deployment code. A third check renders what an
OpenAI-compatible server with the same template is fed by a client whose wrapper places
the notices with :func:`budgetmix.place_notice_openai_chat` (the transport's own wiring
of the placement is issue 16's; this checks the sdk function it uses).
"""

from __future__ import annotations

import dataclasses
import functools
import random
from pathlib import Path
from typing import Any

import pytest
from _layout_fixtures import TEMPLATES, LookupEnv, build_bpe_tokenizer, save_tiny_checkpoint
from budgetmix import Budget, BudgetController, place_notice_openai_chat, render_notice
from budgetmix.adapters import run_agent
from budgetmix.adapters._wire.chat import write_messages
from budgetmix.environment import Task
from budgetmix.evaluation import EvalConfig, Evaluator
from budgetmix.ledger import Ledger
from budgetmix.policies import NotifyEveryTurn
from budgetmix.policies.samplers import FixedBudget
from budgetmix.training.data.models import load_pretrained
from budgetmix.training.rollouts.chat import ChatCodec
from budgetmix.training.rollouts.generation import Generation, GenerationRequest, ScriptedGenerator
from budgetmix.training.rollouts.rollout import EpisodeSpec, RolloutSettings, run_rollouts
from budgetmix.training.rollouts.sampler import Generation as SampledIds
from budgetmix.training.serving import serve

TURNS = 4


def _call(key: str, reasoning: bool) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": f"<think>\nlook up {key}\n</think>\n\n" if reasoning else "",
        "tool_calls": [
            {
                "id": "x",
                "type": "function",
                "function": {"name": "lookup", "arguments": {"key": key}},
            }
        ],
    }


def demonstrator(req: GenerationRequest, *, reasoning: bool = False) -> dict[str, Any]:
    """Three replies; with ``reasoning`` (Qwen3) each one thinks first."""
    done = sum(m["role"] == "assistant" for m in req.messages)
    if done == 2:
        head = "<think>\nadd them\n</think>\n\n" if reasoning else ""
        return {"role": "assistant", "content": head + "The answer is 18."}
    return _call(("alpha", "beta")[done], reasoning)


class Recording(ScriptedGenerator):
    """The demonstrator, recording the context ids of every turn."""

    def __init__(self, codec: ChatCodec) -> None:
        reasoning = "<think>" in codec.template.template  # Qwen3's template
        super().__init__(functools.partial(demonstrator, reasoning=reasoning), codec)
        self.contexts: list[list[int]] = []
        self.replies: list[list[int]] = []

    def generate(self, requests: Any, max_new_tokens: int) -> list[Generation]:
        out = super().generate(requests, max_new_tokens)
        self.contexts += [list(r.context_ids) for r in requests]
        self.replies += [list(g.ids) for g in out]
        return out


def _notices() -> list[str]:
    ledger, out = Ledger(Budget(turns=TURNS)), []
    for _ in range(3):
        ledger.try_charge_turn()
        out.append(render_notice(ledger.state(in_turn=True)))
    return out


@pytest.fixture(scope="module", params=["qwen2.5", "llama3.1", "qwen3"])
def checkpoint(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    family = "llama" if request.param == "llama3.1" else "qwen"
    tokenizer = build_bpe_tokenizer(family)
    if request.param == "qwen3":  # the official template, on its tool-role layout
        tokenizer.chat_template = (TEMPLATES / "Qwen-Qwen3-0.6B.jinja").read_text()
    path = tmp_path_factory.mktemp(f"ckpt-{request.param}")
    save_tiny_checkpoint(family, tokenizer, path)
    return path


def _training(path: Path) -> tuple[Recording, Any, ChatCodec]:
    model, tokenizer = load_pretrained(path)
    codec = ChatCodec.for_model(model, tokenizer)
    gen = Recording(codec)
    task = Task(task_id="lookup-0", seed=0, make_env=LookupEnv)
    spec = EpisodeSpec(task=task, budget=FixedBudget(TURNS).sample(random.Random(0)))
    settings = RolloutSettings(token_check="strict", max_new_tokens=64, max_total_tokens=4096)
    (rollout,) = run_rollouts([spec], gen, codec, settings)
    return gen, rollout, codec


def _deployment(path: Path, replies: list[list[int]]) -> tuple[list[list[int]], Any]:
    chat = serve.chat_model(path, max_new_tokens=64)
    fed: list[list[int]] = []
    real_send = chat.send

    def send(request: str) -> Any:
        fed.append(chat.encode_prompt(request))
        generated = real_send(request)  # the real generate() call, then the scripted ids
        return generated._replace(new_ids=replies[len(fed) - 1])

    chat.send = send  # type: ignore[method-assign]
    env = LookupEnv()
    task = env.reset(0)
    controller = BudgetController(
        Budget(turns=TURNS), notice=NotifyEveryTurn(placement="observation")
    )
    run = run_agent(
        chat, env.controller_tools(), task, controller, system=env.instructions(), judge=env.judge
    )
    return fed, run


def test_a_training_rollout_and_a_controller_episode_feed_the_same_ids(checkpoint: Path) -> None:
    gen, rollout, codec = _training(checkpoint)
    assert rollout.termination == "success" and rollout.num_turns == 3
    assert rollout.drifts == ()  # canonical demonstrations: nothing differs from a re-render
    fed, run = _deployment(checkpoint, gen.replies)
    assert run.success and run.output is not None and run.output.endswith("The answer is 18.")
    assert len(fed) == len(gen.contexts) == 3
    for turn, (deployed, trained) in enumerate(zip(fed, gen.contexts, strict=True), start=1):
        assert deployed == trained, f"turn {turn}: first difference at " + str(
            next(i for i, (a, b) in enumerate(zip(deployed, trained, strict=False)) if a != b)
        )
    # each turn's context extends the last one by the reply and the environment's tokens
    for before, reply, after in zip(gen.contexts, gen.replies, gen.contexts[1:], strict=False):
        assert after[: len(before) + len(reply)] == before + reply
    # the notices sit in the observations and stay there
    text = codec.decode(gen.contexts[-1])
    assert [text.count(n) for n in _notices()] == [1, 1, 1]
    tools = [m for m in rollout.messages if m["role"] == "tool"]
    assert [m["content"] for m in tools] == [
        "value of alpha is 7\n" + _notices()[1],
        "value of beta is 11\n" + _notices()[2],
    ]


def _strip(content: str, notices: list[str]) -> str:
    for n in notices:
        content = content.removesuffix("\n" + n)
    return content


def test_a_server_with_the_template_is_fed_the_same_ids(checkpoint: Path) -> None:
    gen, _rollout, codec = _training(checkpoint)
    notices = _notices()
    _, run = _deployment(checkpoint, gen.replies)
    # the application's own history (no notices), as an OpenAI client sends it
    plain = [dataclasses.replace(m, content=_strip(m.content, notices)) for m in run.messages]
    wire: list[dict[str, Any]] = []
    assistant_at = [i for i, m in enumerate(plain) if m.role == "assistant"]
    starts = [0, *[i + 1 for i in assistant_at]]
    tools = LookupEnv().tool_specs()
    for turn in range(3):
        new = write_messages(plain[starts[turn] : assistant_at[turn]])
        wire = place_notice_openai_chat([*wire, *new], notices[turn], "observation")
        fed = codec.encode(codec.render(wire, generation_prompt=True, tools=tools))
        assert fed == gen.contexts[turn], f"turn {turn + 1}"
        wire.append(write_messages([plain[assistant_at[turn]]])[0])


def test_a_served_checkpoint_under_the_evaluator_is_fed_the_training_ids(
    checkpoint: Path, tmp_path: Path
) -> None:
    """``budgetmix eval --agent checkpoint`` on a tool environment: TrainedPolicyAgent under
    the real Evaluator feeds the model the training rollout's ids every turn (tool messages,
    the notice on the last one), and the environment is stepped once per turn, by the agent."""
    gen, rollout, _codec = _training(checkpoint)
    agent = serve.TrainedPolicyAgent.from_pretrained(checkpoint, max_new_tokens=64)
    fed: list[list[int]] = []

    def scripted(contexts: Any, max_new_tokens: int, episodes: Any = None) -> list[Any]:
        fed.append(list(contexts[0]))
        ids = tuple(gen.replies[len(fed) - 1])  # the demonstrator's ids, its stop id last
        return [SampledIds(ids=ids, logprobs=(0.0,) * len(ids), stopped=True)]

    agent.generator.generate_ids = scripted  # type: ignore[method-assign]
    envs: list[LookupEnv] = []

    def make_env() -> LookupEnv:
        envs.append(LookupEnv())
        return envs[-1]

    tasks = [Task(task_id="lookup-0", seed=0, make_env=make_env)]
    config = EvalConfig(budgets=(TURNS,), notice_format="v1", concurrency=1)
    run = Evaluator(lambda: agent, tasks, config).run(tmp_path / "results.jsonl")
    (record,) = run.records
    assert record.success and record.turns_used == 3
    assert len(fed) == len(gen.contexts) == 3
    for turn, (served, trained) in enumerate(zip(fed, gen.contexts, strict=True), start=1):
        assert served == trained, f"turn {turn}: first difference at " + str(
            next(i for i, (a, b) in enumerate(zip(served, trained, strict=False)) if a != b)
        )
    assert agent._messages == list(rollout.messages)[: len(agent._messages)]
    assert [m["role"] for m in agent._messages].count("tool") == 2
    (env,) = envs  # the evaluator's one environment, stepped by the agent: 2 calls, 1 reply
    assert env.steps == 3 and env.done and env.success
