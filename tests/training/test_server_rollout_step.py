"""An RL step whose rollouts went through the controller and the local OpenAI-compatible
server (issue 18, done when): the ids the loss trains on are the ids the server was fed and
sampled, and the next step's rollouts sample the updated weights. Also: weights reloaded
from a directory, a team's own loop over the budgeted client, and a full context."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from _layout_fixtures import build_bpe_tokenizer, save_tiny_checkpoint
from _server_rollout_env import PickEnv
from budgetmix import Budget, render_notice
from budgetmix.adapters._wire.chat import write_tools
from budgetmix.environment import Task
from budgetmix.exceptions import BudgetExhausted
from budgetmix.ledger import Ledger
from budgetmix.policies.samplers import FixedBudget
from budgetmix.training import TrainConfig
from budgetmix.training.algorithms.objectives import sequence_batch
from budgetmix.training.data.models import load_pretrained
from budgetmix.training.rollouts.generation import Generation, GenerationRequest
from budgetmix.training.rollouts.rollout import EpisodeSpec, Rollout, RolloutSettings, run_rollouts
from budgetmix.training.serving.openai_server import LocalOpenAIServer, ServedCompletion
from budgetmix.training.serving.server_rollout import ServerEpisode, ServerRollouts
from budgetmix.training.trainer import Trainer

TURNS = 2
SFT_STEPS = 60  # enough for the tiny model to write pick calls most of the time


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ckpt")
    save_tiny_checkpoint("qwen", build_bpe_tokenizer("qwen"), path)
    return path


def _config(checkpoint: Path, out: Path) -> TrainConfig:
    return TrainConfig(
        model_path=str(checkpoint),
        env="_server_rollout_env:PickEnv",
        sft_steps=SFT_STEPS,
        sft_batch=4,
        sft_lr=1e-2,
        steps=2,
        groups_per_step=2,
        group_size=4,
        sampler={"kind": "fixed", "turns": TURNS},
        max_new_tokens=32,
        max_total_tokens=4096,
        output_dir=str(out),
        progress=False,
    )


def _notices(turns: int, fmt: str) -> list[str]:
    """The notice of each turn of a ``TURNS``-turn budget, as the controller renders it."""
    ledger, out = Ledger(Budget(turns=TURNS)), []
    for _ in range(turns):
        ledger.try_charge_turn()
        out.append(render_notice(ledger.state(in_turn=True), fmt))
    return out


def _probe(server: LocalOpenAIServer) -> list[float]:
    """The log-probs the server gives a fixed greedy completion."""
    body = {
        "messages": [{"role": "user", "content": "Pick an even number."}],
        "max_tokens": 6,
        "temperature": 0,
        "logprobs": True,
        "return_token_ids": True,
    }
    out = server.chat_completion(body)
    return [c["logprob"] for c in out["choices"][0]["logprobs"]["content"]]


def _in_process(model: Any, entry: ServedCompletion) -> list[float]:
    """The same completion's log-probs computed in-process with ``model`` (greedy, T=1)."""
    ids = torch.tensor([list(entry.prompt_ids) + list(entry.completion_ids)])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, :-1].float()
    logp = torch.log_softmax(logits, dim=-1)
    start = len(entry.prompt_ids) - 1
    return [float(logp[start + i, t]) for i, t in enumerate(entry.completion_ids)]


def _runs(mask: Sequence[int]) -> int:
    """How many runs of 1s ``mask`` has (one per completion of the row)."""
    return sum(1 for i, m in enumerate(mask) if m and (i == 0 or not mask[i - 1]))


def _check_against_server(rollouts: Sequence[Rollout], log: Sequence[ServedCompletion]) -> int:
    """Every row's ids are the server's (rows in the server's order: one episode at a time);
    returns how many rows stitch several turns."""
    cursor = 0
    for r in rollouts:
        ids = [*r.prompt_ids, *r.response_ids]
        served = log[cursor : cursor + _runs(r.response_mask)]
        cursor += len(served)
        # the row is the last prompt the server was fed + what it sampled; every earlier
        # prompt of the episode is a prefix of it
        assert ids == [*served[-1].prompt_ids, *served[-1].completion_ids]
        for s in served:
            assert ids[: len(s.prompt_ids)] == list(s.prompt_ids)
        # the loss trains exactly the sampled ids, with the server's log-probs
        sampled = [t for t, m in zip(r.response_ids, r.response_mask, strict=True) if m]
        assert sampled == [t for s in served for t in s.completion_ids]
        logps = [lp for lp, m in zip(r.logprobs, r.response_mask, strict=True) if m]
        assert logps == pytest.approx([lp for s in served for lp in s.logprobs])
    assert cursor == len(log)
    return sum(_runs(r.response_mask) > 1 for r in rollouts)


class _Replay:
    """A generator that replies with given ids (each row's sampled completions, in order)."""

    def __init__(self, rows: Sequence[Rollout], stops: Sequence[int]) -> None:
        self.replies = [_completions(r) for r in rows]
        self.stops = set(stops)

    def generate(self, requests: Sequence[GenerationRequest], max_new_tokens: int) -> list[Any]:
        out = []
        for req in requests:
            ids = self.replies[req.episode].pop(0)
            out.append(Generation(tuple(ids), (0.0,) * len(ids), ids[-1] in self.stops))
        return out


def _completions(row: Rollout) -> list[list[int]]:
    runs: list[list[int]] = []
    for i, (t, m) in enumerate(zip(row.response_ids, row.response_mask, strict=True)):
        if m and (i == 0 or not row.response_mask[i - 1]):
            runs.append([])
        if m:
            runs[-1].append(t)
    return runs


def _replayed(trainer: Trainer, rows: Sequence[Rollout]) -> list[tuple[Any, ...]]:
    """``rows``' episodes rolled out in-process (run_rollouts) with their own replies."""
    specs = [EpisodeSpec(task=trainer._task(r.seed), budget=r.budget, group=r.group) for r in rows]
    gen = _Replay(rows, trainer.codec.stop_token_ids)
    out = run_rollouts(specs, gen, trainer.codec, trainer.settings)
    return [(r.prompt_ids, r.response_ids, r.response_mask) for r in out]


@pytest.mark.slow
def test_an_rl_step_trains_the_ids_the_server_saw_and_returned(
    checkpoint: Path, tmp_path: Path
) -> None:
    trainer = Trainer(_config(checkpoint, tmp_path / "run"))
    trainer.run(stop_after=SFT_STEPS)
    seen: list[Rollout] = []
    with LocalOpenAIServer(trainer.policy, trainer.tokenizer, seed=3) as server:
        driver = ServerRollouts(server.base_url, "local", settings=trainer.settings, max_parallel=1)

        def rollouts(specs: Sequence[EpisodeSpec]) -> list[Rollout]:
            out = driver(specs)
            seen[:] = out
            return out

        trainer.rl_rollouts = rollouts
        before = _probe(server)
        served_before = len(server.log)
        record = trainer.rl_step()
        log = server.log[served_before:]
        # the trained rows hold the server's ids, token for token
        assert driver.report.episodes == 8 and driver.report.requests == len(log)
        stitched = _check_against_server(seen, log)
        assert stitched >= 1  # measured: most episodes are one stitched row
        assert driver.report.rows == len(seen)
        assert driver.report.split_episodes == len(driver.report.split_turns)
        batch = sequence_batch(seen, int(trainer.tokenizer.pad_token_id))
        for b, r in enumerate(seen):
            n = len(r.prompt_ids) + len(r.response_ids)
            assert batch.input_ids[b, :n].tolist() == [*r.prompt_ids, *r.response_ids]
            assert int(batch.loss_mask[b].sum()) == sum(r.response_mask)
        # the controller was in the loop: each turn's notice kept in its observation
        assert any(r.num_turns >= 2 for r in seen)
        longest = max(seen, key=lambda r: r.num_turns)
        notices = [m["content"] for m in longest.messages if m["role"] in ("user", "tool")]
        expected = _notices(longest.num_turns, trainer.settings.notice_format)
        assert [n.rsplit("\n", 1)[1] for n in notices] == expected[: len(notices)]
        rewards = {r.reward for r in seen}
        assert rewards == {0.0, 1.0} and record["phase"] == "rl"
        # the production path fed the layout training uses: the same replies, played as an
        # in-process training rollout, give the same ids, turn by turn
        stitched_rows = [r for r in seen if _runs(r.response_mask) > 1]
        assert _replayed(trainer, stitched_rows) == [
            (r.prompt_ids, r.response_ids, r.response_mask) for r in stitched_rows
        ]
        # the step changed the served weights: the server now samples the updated policy
        trainer.step += 1
        after = _probe(server)
        assert after != pytest.approx(before, abs=1e-6)
        assert after == pytest.approx(_in_process(trainer.policy, server.log[-1]), abs=1e-4)
        served = len(server.log)
        trainer.rl_step()  # step k+1 rolls out through the server with those weights
        assert len(server.log) > served + 1
        assert {e.weights_version for e in server.log} == {0}  # one shared model object


def test_reload_weights_serves_a_saved_model(checkpoint: Path, tmp_path: Path) -> None:
    model, tokenizer = load_pretrained(checkpoint)
    other = tmp_path / "other"
    save_tiny_checkpoint("qwen", tokenizer, other, seed=1)
    with LocalOpenAIServer(model, tokenizer) as server:
        before = _probe(server)
        reply = httpx.post(
            server.base_url.removesuffix("/v1") + "/reload_weights", json={"path": str(other)}
        )
        assert reply.status_code == 200 and reply.json() == {"weights_version": 1}
        after = _probe(server)
        assert after != pytest.approx(before, abs=1e-6)
        reloaded, _ = load_pretrained(other)
        assert after == pytest.approx(_in_process(reloaded, server.log[-1]), abs=1e-4)
        assert server.log[-1].weights_version == 1
        bad = httpx.post(
            server.base_url.removesuffix("/v1") + "/reload_weights",
            json={"path": str(tmp_path / "none")},
        )
        assert bad.status_code == 400 and "none" in bad.json()["error"]["message"]


def _own_loop(rewrite: bool) -> Any:
    """A team's own agent loop over the budgeted client: every reply gets a user message
    back until the budget ends the episode (``rewrite``: it edits its history first)."""

    def play(ep: ServerEpisode) -> Any:
        history: list[dict[str, Any]] = [
            {"role": "system", "content": ep.env.instructions()},
            {"role": "user", "content": ep.task},
        ]
        tools = write_tools(ep.env.tool_specs())
        with ep.controller.episode() as episode:
            for n in range(10):
                try:
                    reply = ep.client.chat.completions.create(
                        messages=history, tools=tools, **ep.request_options
                    )
                except BudgetExhausted:
                    break
                history.append(
                    {"role": "assistant", "content": reply.choices[0].message.content or ""}
                )
                if rewrite:
                    history[-1]["content"] = f"edited {n}"
                history.append({"role": "user", "content": "Again."})
        return episode.result

    return play


@pytest.mark.parametrize("rewrite", [False, True])
def test_a_loop_of_its_own_over_the_budgeted_client(checkpoint: Path, rewrite: bool) -> None:
    model, tokenizer = load_pretrained(checkpoint)
    settings = RolloutSettings(max_new_tokens=8)
    with LocalOpenAIServer(model, tokenizer) as server:
        driver = ServerRollouts(
            server.base_url, "local", settings=settings, agent=_own_loop(rewrite), max_parallel=1
        )
        task = Task(task_id="pick-0", seed=0, make_env=PickEnv)
        spec = EpisodeSpec(task=task, budget=FixedBudget(3).sample(random.Random(0)))
        rows = driver([spec, spec])
        assert driver.report.requests == len(server.log) == 6  # 3 turns each
        # stitched or not (an untrained model's replies rarely re-render as sampled), the
        # rows hold the server's ids; an edited history always falls back to a row per turn
        _check_against_server(rows, server.log)
        assert driver.report.split_episodes == len(driver.report.split_turns)
        if rewrite:
            assert driver.report.split_turns == (2, 2) and len(rows) == 6
    # the wrapper placed each turn's notice in the latest user message, kept in the history
    assert all(r.termination == "budget_exhausted" and r.num_turns == 3 for r in rows)
    users = [m["content"] for m in rows[-1].messages if m["role"] == "user"]
    assert "turn 1 of 3" in users[0] and "turn 2 of 3" in users[1]


def test_a_full_context_ends_the_episode_as_length(checkpoint: Path) -> None:
    model, tokenizer = load_pretrained(checkpoint)
    task = Task(task_id="pick-0", seed=0, make_env=PickEnv)
    settings = RolloutSettings(max_new_tokens=8)
    with LocalOpenAIServer(model, tokenizer) as server:
        driver = ServerRollouts(
            server.base_url, "local", settings=settings, agent=_own_loop(False), max_parallel=1
        )
        spec = EpisodeSpec(task=task, budget=FixedBudget(3).sample(random.Random(0)))
        driver([spec])
        # room for the first turn only: the second request is refused as too long
        server.max_model_len = len(server.log[0].prompt_ids) + 8 + 4
        (row,) = driver([spec])
    assert (row.termination, row.reward, driver.report.requests) == ("length", 0.0, 1)
    assert [*row.prompt_ids, *row.response_ids] == [
        *server.log[3].prompt_ids,
        *server.log[3].completion_ids,
    ]


def _framework_loop(ep: ServerEpisode) -> Any:
    """A framework's own OpenAI client over the budget transport (the framework path):
    ``BudgetTransport(TokenCapture(), controller)`` charges the turns, places the notices,
    and records the ids."""
    import openai
    from budgetmix.adapters import BudgetTransport
    from budgetmix.training.serving.server_tokens import TokenCapture

    http: Any = httpx.Client(transport=BudgetTransport(TokenCapture(), ep.controller))
    client = openai.OpenAI(base_url=ep.base_url, api_key="x", http_client=http, max_retries=0)
    history: list[dict[str, Any]] = [{"role": "user", "content": ep.task}]
    with ep.controller.episode() as episode:
        for _ in range(3):
            reply = client.chat.completions.create(messages=history, **ep.request_options)
            history.append({"role": "assistant", "content": reply.choices[0].message.content})
            history.append({"role": "user", "content": "Again."})
    client.close()
    return episode.result


def _three_turns_through(checkpoint: Path, agent: Any) -> list[Any]:
    """One 3-turn episode of ``agent`` through a LocalOpenAIServer: the rows equal the
    server's log and the notices were placed in the user messages."""
    model, tokenizer = load_pretrained(checkpoint)
    with LocalOpenAIServer(model, tokenizer) as server:
        driver = ServerRollouts(
            server.base_url,
            "local",
            settings=RolloutSettings(max_new_tokens=8),
            agent=agent,
            max_parallel=1,
        )
        task = Task(task_id="pick-0", seed=0, make_env=PickEnv)
        rows = driver([EpisodeSpec(task=task, budget=FixedBudget(3).sample(random.Random(0)))])
        assert driver.report.requests == len(server.log) == 3
        _check_against_server(rows, server.log)
    users = [m["content"] for m in rows[-1].messages if m["role"] == "user"]
    assert "turn 1 of 3" in users[0] and "turn 3 of 3" in users[2]  # placed by the transport
    return rows


def test_a_framework_client_over_the_budget_transport(checkpoint: Path) -> None:
    rows = _three_turns_through(checkpoint, _framework_loop)
    assert rows[0].num_turns == 3


def _async_loop(ep: ServerEpisode) -> Any:
    """An asyncio loop of its own: budgeted(openai.AsyncOpenAI) over AsyncTokenCapture."""
    import asyncio

    import openai
    from budgetmix.adapters import budgeted
    from budgetmix.training.serving.server_tokens import AsyncTokenCapture

    async def play() -> Any:
        http: Any = httpx.AsyncClient(transport=AsyncTokenCapture())
        raw = openai.AsyncOpenAI(base_url=ep.base_url, api_key="x", http_client=http, max_retries=0)
        client = budgeted(raw, ep.controller)
        history: list[dict[str, Any]] = [{"role": "user", "content": ep.task}]
        async with ep.controller.episode() as episode:
            for _ in range(3):
                reply = await client.chat.completions.create(messages=history, **ep.request_options)
                history.append({"role": "assistant", "content": reply.choices[0].message.content})
                history.append({"role": "user", "content": "Again."})
        await raw.close()
        return episode.result

    return asyncio.run(play())  # each episode's thread runs its own event loop


def test_an_async_client_records_the_ids_the_same_way(checkpoint: Path) -> None:
    _three_turns_through(checkpoint, _async_loop)
