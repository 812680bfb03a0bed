"""A served checkpoint keeps its episode's KV cache: turn 2+ runs the model on the new ids only,
and the agent acts exactly as when it re-read its whole context every turn."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from budgetmix import Budget, BudgetController, NotifyEveryTurn
from budgetmix.training.envs import FrozenLakeEnv
from budgetmix.training.serving.serve import TrainedPolicyAgent

TURNS = 4


def _episode(agent: TrainedPolicyAgent, seed: int) -> tuple[list[str], list[int]]:
    """One FrozenLake episode under the controller: the actions and every id the agent held."""
    env = FrozenLakeEnv(map_name="4x4", slippery=False)
    agent.start(env, seed)
    observation = env.reset(seed)
    actions: list[str] = []
    controller = BudgetController(Budget(turns=TURNS), notice=NotifyEveryTurn("v1-compact"))
    with controller.episode() as ep:
        for turn in ep.turns():
            action = agent.act(observation, turn.notice, None)
            assert isinstance(action, str)
            actions.append(action)
            result = env.step(action)
            observation = result.observation
            if result.done:
                ep.finish(success=result.success)
                break
    return actions, list(agent._ids or [])


def _rereading(agent: TrainedPolicyAgent) -> TrainedPolicyAgent:
    """The agent as it was before the cache: every turn's context re-read (no episode key)."""
    generate = agent.generator.generate_ids
    agent.generator.generate_ids = lambda contexts, n, episodes=None: generate(contexts, n)  # type: ignore[method-assign]
    return agent


@pytest.mark.parametrize("temperature", [0.0, 1.0], ids=["greedy", "seeded"])
def test_the_cached_agent_acts_as_the_rereading_one(
    temperature: float, tokenizer: Any, tiny_model: Any
) -> None:
    def agent() -> TrainedPolicyAgent:
        return TrainedPolicyAgent(
            tiny_model, tokenizer, temperature=temperature, max_new_tokens=6, seed=5
        )

    cached, reread = agent(), _rereading(agent())
    for seed in (1, 2):  # two episodes: the second starts from a dropped cache
        a, b = _episode(cached, seed), _episode(reread, seed)
        assert a == b
        assert len(a[0]) == TURNS  # every turn ran (an untrained model never reaches G)
    assert cached.generator.sampler.ids_fed < reread.generator.sampler.ids_fed / 2
    assert cached.generator.sampler.cached_episodes == 1
    assert reread.generator.sampler.cached_episodes == 0


def test_turns_after_the_first_run_the_model_on_the_new_ids_only(
    tokenizer: Any, tiny_model: Any
) -> None:
    agent = TrainedPolicyAgent(tiny_model, tokenizer, temperature=0.0, max_new_tokens=6)
    widths: list[int] = []  # ids of every forward pass (batch of one: no padding)
    tiny_model.register_forward_pre_hook(
        lambda _m, _args, kwargs: widths.append(int(kwargs["input_ids"].shape[1])),
        with_kwargs=True,
    )
    calls: list[tuple[list[int], tuple[int, ...], list[int]]] = []
    generate = agent.generator.generate_ids

    def recording(contexts: Any, n: int, episodes: Any = None) -> Any:
        widths.clear()
        out = generate(contexts, n, episodes)
        calls.append((list(contexts[0]), out[0].ids, list(widths)))
        return out

    agent.generator.generate_ids = recording  # type: ignore[method-assign]
    for seed in (1, 2):
        calls.clear()
        _episode(agent, seed)
        assert len(calls) == TURNS
        context, _, runs = calls[0]
        assert runs[0] == len(context)  # a new episode: its prompt, whole
        for (before, sampled, _), (context, _, runs) in itertools.pairwise(calls):
            held = len(before) + len(sampled) - 1  # the last sampled id was not fed
            assert context[:held] == [*before, *sampled][:held]
            assert runs[0] == len(context) - held < len(context) / 2  # only the new ids
        for _, sampled, runs in calls:
            assert runs[1:] == [1] * (len(sampled) - 1)  # then one id per sampled id
