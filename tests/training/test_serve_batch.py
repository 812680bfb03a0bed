"""Batched checkpoint evaluation: concurrent episodes share forward passes and act as at batch 1.

Under the real Evaluator, agents from ``TrainedPolicyAgent.factory(batch_size=4)`` give the
same ids, actions and records as batch-1 agents, greedy and seeded (each episode drawing
from its own stream), with episodes of different prompt lengths and budgets (some end
while others go on), their long prompts and observations prefilled alone and joined into
the batch. A request whose forward pass fails (in its batch or in its own prefill), or an
episode that raises in its own code, fails alone.
"""

from __future__ import annotations

import functools
import gc
import pickle
import threading
from typing import Any, ClassVar

import pytest
from budgetmix.environment import Task
from budgetmix.evaluation import EvalConfig, Evaluator
from budgetmix.exceptions import ConfigError
from budgetmix.training.envs import FrozenLakeEnv
from budgetmix.training.rollouts.generation import ModelGenerator
from budgetmix.training.serving.serve import TrainedPolicyAgent
from budgetmix.training.serving.serve_batch import BatchedGenerator, EpisodeBatcher
from budgetmix.training.serving.serve_rows import PREFILL_IDS

MAX_NEW = 6


class _Recording(TrainedPolicyAgent):
    """Seeds its stream per episode (from the evaluator's seed: distinct episodes draw
    distinct ids) and records every episode's actions and ids into ``log``."""

    log: ClassVar[list[tuple[int, int | None, tuple[str, ...], tuple[int, ...]]]] = []

    def start(self, env: Any, seed: int) -> None:
        super().start(env, seed)
        self._seed, self._actions, self._first = seed, [], None
        self.generator.generator.manual_seed(seed)  # type: ignore[union-attr]

    def act(self, observation: str, notice: str | None, turns_remaining: int | None) -> Any:
        if self._first is None:
            self._first = turns_remaining
        action = super().act(observation, notice, turns_remaining)
        self._actions.append(str(action))
        self.log.append((self._seed, self._first, tuple(self._actions), tuple(self._ids or [])))
        return action


class _RaisingLake(FrozenLakeEnv):
    """Fails at its second step (a bug in one episode's environment)."""

    def step(self, action: str) -> Any:
        self.steps = getattr(self, "steps", 0) + 1
        if self.steps == 2:
            raise RuntimeError("environment bug")
        return super().step(action)


def _tasks(raising: bool = False) -> list[Task]:
    lake = functools.partial(FrozenLakeEnv, slippery=False)
    return [
        Task(task_id="4x4", seed=0, make_env=functools.partial(lake, map_name="4x4")),
        Task(task_id="8x8", seed=1, make_env=functools.partial(lake, map_name="8x8")),
        Task(
            task_id="bug",
            seed=2,
            make_env=functools.partial(
                _RaisingLake if raising else FrozenLakeEnv, map_name="4x4", slippery=False
            ),
        ),
    ]


def _evaluate(
    model: Any, tokenizer: Any, tmp_path: Any, *, batch_size: int, temperature: float, **kw: Any
) -> tuple[list[Any], list[Any], Any]:
    class Agent(_Recording):
        log: ClassVar[list[Any]] = []

    make = Agent.factory(
        model,
        tokenizer,
        batch_size=batch_size,
        flush_s=30.0,  # batches form by count: every episode in flight has a turn pending
        temperature=temperature,
        max_new_tokens=MAX_NEW,
    )
    config = EvalConfig(budgets=(2, 5), samples=2, concurrency=4, notice_format="v1-compact", **kw)
    path = tmp_path / f"b{batch_size}.jsonl"
    run = Evaluator(make, _tasks(kw.get("on_error") == "record"), config).run(path)
    return list(run.records), sorted(Agent.log), make().generator


def _fields(record: Any) -> tuple[Any, ...]:
    return (record.task_id, record.budget, record.sample, record.success, record.failure,
            record.turns_used, record.output_tokens, record.error)  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("temperature", [0.0, 1.0], ids=["greedy", "seeded"])
def test_batched_episodes_act_as_at_batch_1(
    temperature: float, tokenizer: Any, tiny_model: Any, tmp_path: Any
) -> None:
    one, one_log, single = _evaluate(
        tiny_model, tokenizer, tmp_path, batch_size=1, temperature=temperature
    )
    four, four_log, batched = _evaluate(
        tiny_model, tokenizer, tmp_path, batch_size=4, temperature=temperature
    )
    assert isinstance(single, ModelGenerator) and isinstance(batched, BatchedGenerator)
    assert four_log == one_log  # every turn's actions and ids, episode by episode
    assert [_fields(r) for r in four] == [_fields(r) for r in one]
    assert len(one_log) > 12 * 2  # 12 episodes (3 tasks x 2 budgets x 2 samples) played
    # episodes of different lengths: prompts of two map sizes, budgets 2 and 5
    assert len({len(ids) for *_, ids in one_log}) > 4
    assert {r.turns_used for r in one} >= {2, 5}
    assert max(batched.batcher.batches) == 4 and sum(batched.batcher.batches) == len(one_log)
    # the prompts (hundreds of ids) and observations were prefilled alone, then joined
    assert batched.batcher.prefilled == len(one_log)
    if temperature:  # distinct episodes drew distinct actions (the streams are their own)
        assert len({actions for _, _, actions, _ in one_log}) > 3
    # every ended episode left the batches (only the agent built just now is in flight)
    gc.collect()  # an agent the evaluator left in a reference cycle is released by its finalizer
    assert batched.batcher.cached_episodes == 0 and batched.batcher.in_flight == 1


def test_an_episode_that_raises_does_not_break_the_others(
    tokenizer: Any, tiny_model: Any, tmp_path: Any
) -> None:
    one, one_log, _ = _evaluate(
        tiny_model, tokenizer, tmp_path, batch_size=1, temperature=1.0, on_error="record"
    )
    four, four_log, batched = _evaluate(
        tiny_model, tokenizer, tmp_path, batch_size=4, temperature=1.0, on_error="record"
    )
    errors = [r for r in four if r.failure == "error"]
    assert {r.task_id for r in errors} == {"bug"} and len(errors) == 4
    assert [_fields(r) for r in four] == [_fields(r) for r in one]
    assert four_log == one_log
    assert max(batched.batcher.batches) == 4


def _batch_1(model: Any, tokenizer: Any, seed: int, turns: list[list[int]]) -> list[Any]:
    gen = ModelGenerator.seeded(model, tokenizer, temperature=1.0, batch_size=1, seed=seed)
    out, context = [], list(turns[0])
    for turn, new in enumerate(turns):
        context = context if turn == 0 else context + list(out[-1].ids) + new
        (g,) = gen.generate_ids([context], MAX_NEW, [0])
        out.append(g)
    return out


@pytest.mark.parametrize("where", ["batch", "prefill"])
def test_a_failing_request_fails_alone_and_the_batch_goes_on(
    where: str, tokenizer: Any, tiny_model: Any
) -> None:
    batcher = EpisodeBatcher(tiny_model, tokenizer, temperature=1.0, batch_size=3, flush_s=60)
    vocab = int(tiny_model.get_input_embeddings().weight.shape[0])
    long = list(range(40, 40 + PREFILL_IDS))  # prefilled alone, in its own thread
    turns = {  # per episode: the prompt, then what the environment adds each turn
        1: [[5, 6, 7, 8, 9, 10, 11], [12, 13, *long]],
        2: [[20, 21], [22, 23, 24, 25, 26]],
        # an id past the vocabulary: the forward pass fails (its batch's, or its prefill)
        3: [[30, vocab + 5, 31, *(long if where == "prefill" else [])], [32]],
    }
    handles = {e: batcher.generator(seed=e) for e in turns}
    barrier = threading.Barrier(3)
    results: dict[int, list[Any]] = {e: [] for e in turns}

    def play(episode: int) -> None:
        handle, context = handles[episode], list(turns[episode][0])
        for turn, new in enumerate(turns[episode]):
            if turn:
                context += [*results[episode][-1].ids, *new]
            else:
                barrier.wait()  # the three first turns are pending together
            try:
                (g,) = handle.generate_ids([context], MAX_NEW, [0])
            except IndexError as exc:
                results[episode].append(exc)
                handle.reset()  # as the agent does: the episode ends
                return
            results[episode].append(g)

    threads = [threading.Thread(target=play, args=(e,)) for e in turns]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert isinstance(results[3][0], IndexError) and len(results[3]) == 1
    for e in (1, 2):
        alone = _batch_1(tiny_model, tokenizer, e, turns[e])
        assert [(g.ids, g.stopped) for g in results[e]] == [(g.ids, g.stopped) for g in alone]
        for g, a in zip(results[e], alone, strict=True):  # the logits differ by rounding only
            assert g.logprobs == pytest.approx(a.logprobs, abs=1e-4)
    # the failed batch of 3 (or the failed prefill, alone), then the two that went on
    assert batcher.batches == ([3, 2] if where == "batch" else [2, 2])
    assert batcher.prefilled == 1  # episode 1's long second turn
    assert batcher.cached_episodes == 2


def test_settings_are_checked_and_the_batcher_pickles(tokenizer: Any, tiny_model: Any) -> None:
    with pytest.raises(ConfigError, match="batch_size"):
        TrainedPolicyAgent.factory(tiny_model, tokenizer, batch_size=0)
    with pytest.raises(ConfigError, match="temperature"):
        TrainedPolicyAgent.factory(tiny_model, tokenizer, batch_size=2, temperature=-1.0)
    batcher = EpisodeBatcher(tiny_model, tokenizer, temperature=1.0, batch_size=2)
    with pytest.raises(ConfigError, match="another model or temperature"):
        TrainedPolicyAgent(tiny_model, tokenizer, temperature=0.0, batcher=batcher)
    copy = pickle.loads(pickle.dumps(batcher))  # a Ray worker's copy: settings, no queue
    assert (copy.batch_size, copy.temperature, copy.stop_ids) == (2, 1.0, batcher.stop_ids)
    gen = copy.generator(seed=0)
    (g,) = gen.generate_ids([[5, 6, 7]], 3, [0])
    assert 1 <= len(g.ids) <= 3 and copy.batches == [1]
