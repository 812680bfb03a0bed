"""Clean labels on noisy states: a demonstrator's injected errors are executed, not learned."""

from __future__ import annotations

import random
from typing import Any

import pytest
from budgetmix.exceptions import ConfigError
from budgetmix.policies.samplers import FixedBudget
from budgetmix.training.envs import env_spec, env_tasks, make_env
from budgetmix.training.envs.demo import DemoReply
from budgetmix.training.envs.fault_chain_oracle import CHAIN_MOVES, OK
from budgetmix.training.experiment.config import ExperimentConfig
from budgetmix.training.experiment.environments import experiment_env
from budgetmix.training.rollouts.chat import ChatCodec
from budgetmix.training.rollouts.generation import GenerationRequest, ScriptedGenerator
from budgetmix.training.rollouts.rollout import EpisodeSpec, RolloutSettings, run_rollouts
from budgetmix.training.toy import echo_agent

SETTINGS = RolloutSettings(notice_format="v1", token_check="strict")


class _Marking:
    """The echo agent, its replies wrapped: every second turn is marked not to imitate."""

    def __init__(self) -> None:
        self.inner = echo_agent(error_rate=0.3, seed=1)
        self.turns = 0

    def __call__(self, request: GenerationRequest) -> DemoReply:
        self.turns += 1
        return DemoReply(self.inner(request), imitate=self.turns % 2 == 0)


def _specs(n: int, turns: int) -> list[EpisodeSpec]:
    draw = FixedBudget(turns).sample(random.Random(0))
    return [EpisodeSpec(task=t, budget=draw, group=i)
            for i, t in enumerate(env_tasks("echo", range(n), {}))]  # fmt: skip


def test_a_reply_marked_not_to_imitate_is_executed_but_masked_out(tokenizer: Any) -> None:
    codec = ChatCodec(tokenizer)
    plain = run_rollouts(_specs(1, 6), ScriptedGenerator(echo_agent(0.3, 1), tokenizer),
                         codec, SETTINGS)  # fmt: skip
    marked = run_rollouts(_specs(1, 6), ScriptedGenerator(_Marking(), tokenizer), codec, SETTINGS)
    (a,), (b,) = plain, marked
    assert a.response_ids == b.response_ids and a.steps == b.steps  # the same episode
    assert b.num_turns >= 2
    eos = tokenizer.eos_token_id
    learned: list[int] = []
    for k, step in enumerate(b.steps, start=1):  # odd turns are marked out
        if k % 2 == 0:
            learned += [*tokenizer.encode(step.action, add_special_tokens=False), eos]
    kept = [t for t, m in zip(b.response_ids, b.response_mask, strict=True) if m]
    assert kept == learned
    assert sum(a.response_mask) > sum(b.response_mask) > 0


def _request(env: Any, left: int, used: int) -> Any:
    state = type("S", (), {"turns_remaining": left, "turn_number": used + 1})()
    return type("R", (), {"env": env, "state": state})()


@pytest.mark.parametrize("labels", ["taken", "optimal"])
def test_the_chain_demonstrator_marks_exactly_its_errors(labels: str) -> None:
    kwargs = {"hops": 4, "demo_budget_aware": True, "demo_ceiling": 11, "demo_labels": labels}
    agent: Any = env_spec("fault-chain-compact").make_demo_agent(kwargs, 0.3, 5)
    env = make_env("fault-chain-compact", hops=4)
    env.reset(0)
    n, wrong, marked = 3000, 0, 0
    for i in range(n):
        left = 2 + i % 9
        best = CHAIN_MOVES[agent.best(env.model, (0, OK), left, 0)]
        reply = agent(_request(env, left, 0))
        if labels == "taken":
            assert isinstance(reply, str)
            wrong += reply != best
            continue
        assert isinstance(reply, DemoReply)
        wrong += reply.reply != best
        marked += not reply.imitate
        assert reply.imitate == (reply.reply == best)
    assert abs(wrong / n - 0.3) < 0.04  # errs at its rate either way
    assert marked == (wrong if labels == "optimal" else 0)


def test_the_experiment_passes_its_labels_to_the_chain_demonstrator_only() -> None:
    chain = {"env": "fault-chain-compact", "env_kwargs": {"hops": 4}, "sft_error_rate": 0.2}
    env = experiment_env(ExperimentConfig(**chain, sft_labels="optimal"))
    assert env.kwargs["demo_labels"] == "optimal"
    assert experiment_env(ExperimentConfig(**chain)).kwargs["demo_labels"] == "taken"
    with pytest.raises(ConfigError, match="sft_labels: 'optimal' needs 'fault-chain-compact'"):
        experiment_env(ExperimentConfig(sft_labels="optimal"))
    with pytest.raises(ConfigError, match="sft_labels must be one of 'taken', 'optimal'"):
        ExperimentConfig(sft_labels="clean")


def test_the_default_labels_leave_earlier_config_hashes_unchanged() -> None:
    assert "sft_labels" not in ExperimentConfig().to_dict()  # the demo's fingerprint holds
    assert ExperimentConfig(sft_labels="optimal").to_dict()["sft_labels"] == "optimal"


def test_sft_budgets_every_draws_each_turns_left_value_and_design_keeps_the_mix(
    tmp_path: Any,
) -> None:
    from budgetmix.policies.samplers import sampler_from_config
    from budgetmix.training.experiment.run import ExperimentRun

    chain = {"env": "fault-chain-compact", "env_kwargs": {"hops": 4}, "sft_error_rate": 0.2}
    every = ExperimentRun(ExperimentConfig(**chain, sft_budgets="every"), tmp_path, False)
    sampler = sampler_from_config(every.sft_sampler())
    assert sampler.support() == tuple(range(1, every.ceiling + 1))
    rng = random.Random(0)
    seen = {sampler.sample(rng).turns for _ in range(400)}
    assert seen == set(range(1, every.ceiling + 1))
    design = ExperimentRun(ExperimentConfig(**chain), tmp_path, False)
    assert design.sft_sampler() == design.mix_sampler()  # the old recipe, unchanged
    assert "sft_budgets" not in ExperimentConfig().to_dict()
    with pytest.raises(ConfigError, match="sft_budgets must be one of 'design', 'every'"):
        ExperimentConfig(sft_budgets="all")


def test_the_guess_share_is_learned_and_the_same_at_every_budget() -> None:
    kwargs = {"hops": 4, "demo_ceiling": 13, "demo_labels": "optimal", "demo_guess_share": 0.25}
    agent: Any = env_spec("fault-chain-compact").make_demo_agent(kwargs, 0.2, 7)
    env = make_env("fault-chain-compact", hops=4)
    env.reset(0)
    assert agent.budget_blind and CHAIN_MOVES[agent.best(env.model, (0, OK), 3, 0)] != "g"
    for lefts in ((2, 3, 4, 5), (9, 10, 11, 12)):  # guessing pays at the first, not the second
        replies = [agent(_request(env, lefts[i % 4], 0)) for i in range(4000)]
        learned = [r.reply for r in replies if r.imitate]
        share = learned.count("g") / len(learned)
        assert abs(share - 0.25) < 0.03, lefts  # the learned labels guess at the share
        assert abs(1 - len(learned) / len(replies) - 0.2) < 0.03  # errors: executed, masked
    env.step("g")  # a guess in hand is answered, whatever the budget
    for left in (2, 12):
        replies = [agent(_request(env, left, 1)) for _ in range(400)]
        assert {r.reply for r in replies if r.imitate} == {"a"}
    plain: Any = env_spec("fault-chain-compact").make_demo_agent({**kwargs, "demo_guess_share": 0},
                                                                 0.2, 7)  # fmt: skip
    assert {plain(_request(env, 12, 1)).reply for _ in range(50)} != {"a"}  # the blind optimum


def test_the_guess_share_reaches_the_chain_demonstrator_only_and_keeps_old_hashes() -> None:
    chain = {"env": "fault-chain-compact", "env_kwargs": {"hops": 4}, "sft_error_rate": 0.2}
    env = experiment_env(ExperimentConfig(**chain, sft_guess_share=0.15))
    assert env.kwargs["demo_guess_share"] == 0.15
    assert "demo_guess_share" not in experiment_env(ExperimentConfig(**chain)).kwargs
    assert "sft_guess_share" not in ExperimentConfig(**chain).to_dict()
    assert ExperimentConfig(**chain, sft_guess_share=0.15).to_dict()["sft_guess_share"] == 0.15
    with pytest.raises(ConfigError, match="sft_guess_share: needs 'fault-chain-compact'"):
        experiment_env(ExperimentConfig(sft_guess_share=0.1))
    with pytest.raises(ConfigError, match="sft_guess_share"):
        ExperimentConfig(**chain, sft_guess_share=1.5)


def test_exploration_gives_the_success_share_and_the_share_of_groups_that_vary(
    tmp_path: Any,
) -> None:
    from budgetmix.training.diagnostics.episodes import pointwise
    from budgetmix.training.envs.fault_chain_oracle import HELD
    from budgetmix.training.experiment.pilot import exploration
    from budgetmix.training.experiment.run import ExperimentRun

    chain = {"env": "fault-chain-compact", "env_kwargs": {"hops": 4}, "sft_error_rate": 0.2}
    run = ExperimentRun(ExperimentConfig(**chain), tmp_path, False)
    lookups = exploration(run, pointwise(lambda p: "n"), 3, episodes=64, group_size=8)
    assert lookups["success"] == 0.0 and lookups["mixed_groups"] == 0.0  # 4 links need 5 turns
    guess = pointwise(lambda p: "a" if p.state[1] == HELD else "g")
    res = exploration(run, guess, 3, episodes=400, group_size=8)
    p = res["success"]
    assert abs(p - 0.3) < 0.08  # the guess holds at guess_p, then the answer lands
    assert res["mixed_groups"] == pytest.approx(1 - p**8 - (1 - p) ** 8)
    with pytest.raises(ConfigError, match="group_size"):
        exploration(run, guess, 3, episodes=4, group_size=0)
