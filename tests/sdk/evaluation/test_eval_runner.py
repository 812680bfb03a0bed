"""The evaluator: the grid, prefix sharing, budget visibility, faults, model agents."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from _eval_doubles import AsyncWalker, LineEnv, RandomWalker, Script, line_tasks
from budgetmix.adapters.base import ModelRequest, ModelResponse, Usage
from budgetmix.adapters.env_agent import ChatModelEnvAgent
from budgetmix.adapters.testing import ScriptedModel
from budgetmix.environment import Task
from budgetmix.evaluation import (
    EpisodeRecord,
    EvalConfig,
    Evaluator,
    ScriptedEnvAgent,
    read_results,
)
from budgetmix.exceptions import ConfigError

BUDGETS = (2, 3, 5, 8, 13)


def comparable(r: EpisodeRecord) -> EpisodeRecord:
    """Everything but wall-clock latency and the prefix-sharing marker."""
    return replace(r, latency_s=0.0, derived=False)


def test_grid_covers_every_task_budget_sample(tmp_path: Path) -> None:
    cfg = EvalConfig(budgets=(5, 2, 5, 3), samples=3, concurrency=4)
    run = Evaluator(lambda: RandomWalker(sees_budget=True), line_tasks(3), cfg).run(
        tmp_path / "r.jsonl"
    )
    assert cfg.budgets == (2, 3, 5)
    assert {r.key for r in run.records} == {
        (f"line-{i}", b, s) for i in range(3) for b in (2, 3, 5) for s in range(3)
    }
    assert run.live_episodes == 27 and run.derived_records == 0
    for r in run.records:
        assert r.turns_used <= r.budget
        assert r.success == (r.failure == "success")
        assert r.model_calls == r.turns_used == r.env_calls
    # the file holds exactly what the run returned
    assert set(read_results(tmp_path / "r.jsonl").records) == set(run.records)


@pytest.mark.parametrize("make_agent", [RandomWalker, AsyncWalker])
def test_prefix_sharing_equals_separate_runs(tmp_path: Path, make_agent: Any) -> None:
    tasks = line_tasks(4)
    base = EvalConfig(budgets=BUDGETS, samples=5, concurrency=8)
    shared = Evaluator(lambda: make_agent(sees_budget=False), tasks, base).run(tmp_path / "a")
    separate_cfg = replace(base, prefix_sharing=False)
    separate = Evaluator(lambda: make_agent(sees_budget=False), tasks, separate_cfg).run(
        tmp_path / "b"
    )
    assert sorted(map(comparable, shared.records), key=lambda r: r.key) == sorted(
        map(comparable, separate.records), key=lambda r: r.key
    )
    assert shared.live_episodes == 4 * 5 and separate.live_episodes == 4 * 5 * len(BUDGETS)
    assert shared.derived_records == 4 * 5 * (len(BUDGETS) - 1)
    # the work saved: steps executed vs what separate runs executed
    assert shared.env_steps_separate == separate.env_steps
    assert shared.env_steps < separate.env_steps


def test_prefix_sharing_on_frozenlake_with_noisy_oracle(tmp_path: Path) -> None:
    envs = pytest.importorskip("budgetmix.training.envs")
    pytest.importorskip("gymnasium")
    tasks = [
        Task(
            task_id=f"fl-{i}",
            make_env=lambda: envs.FrozenLakeEnv(map_name="4x4", success_rate=0.8),
            seed=i,
        )
        for i in range(3)
    ]

    def agent() -> ScriptedEnvAgent:
        oracle = envs.NoisyOracle(envs.FrozenLakeOracle(), mistake_rate=0.3)
        return ScriptedEnvAgent(oracle, sees_budget=False)

    cfg = EvalConfig(budgets=(4, 8, 16), samples=3, env_seed_mode="sample", fault_step=2)
    a = Evaluator(agent, tasks, cfg).run(tmp_path / "a")
    b = Evaluator(agent, tasks, replace(cfg, prefix_sharing=False)).run(tmp_path / "b")
    assert [comparable(r) for r in a.records] == [comparable(r) for r in b.records]
    assert all(r.fault_injected for r in a.records)  # every episode reached step 2
    assert {r.mistake_kinds[0] for r in a.records if r.mistakes} >= {"env_action_failed"}


def test_budget_aware_agents_see_notice_and_turns(tmp_path: Path) -> None:
    seen: list[RandomWalker] = []

    def factory(sees: bool) -> RandomWalker:
        agent = RandomWalker(sees_budget=sees)
        seen.append(agent)
        return agent

    tasks = [Task(task_id="t", make_env=lambda: LineEnv(goal=100), seed=0)]
    Evaluator(lambda: factory(True), tasks, EvalConfig(budgets=(3,))).run(tmp_path / "a")
    played = [a for a in seen if a.seen]
    assert [t for _, t in played[0].seen] == [3, 2, 1]
    assert played[0].seen[0][0] == "Budget (v1): turn 1 of 3, 3 turns left including this one."
    seen.clear()
    Evaluator(lambda: factory(False), tasks, EvalConfig(budgets=(3,))).run(tmp_path / "b")
    assert [a.seen for a in seen if a.seen] == [[(None, None)] * 3]
    seen.clear()
    cfg = EvalConfig(budgets=(2,), notice_format=None)
    Evaluator(lambda: factory(True), tasks, cfg).run(tmp_path / "c")
    assert [a.seen for a in seen if a.seen] == [[(None, 2), (None, 1)]]


def test_extrapolated_budgets_are_labelled(tmp_path: Path) -> None:
    cfg = EvalConfig(budgets=(2, 4, 8), training_ceiling=4)
    run = Evaluator(lambda: RandomWalker(), line_tasks(2), cfg).run(tmp_path / "r")
    assert {r.budget: r.extrapolated for r in run.records} == {2: False, 4: False, 8: True}


def test_fault_injection_recovery_fields(tmp_path: Path) -> None:
    tasks = [Task(task_id="t", make_env=lambda: LineEnv(goal=3), seed=0)]
    cfg = EvalConfig(budgets=(1, 2, 3, 4, 6), fault_step=2)
    run = Evaluator(lambda: Script(["+"]), tasks, cfg).run(tmp_path / "r")
    by_t = {r.budget: r for r in run.records}
    assert not by_t[1].fault_injected and by_t[1].fault_recovered is None
    assert by_t[2].fault_injected and by_t[2].fault_recovered is False
    assert by_t[3].fault_recovered and by_t[3].fault_turns_to_recover == 1
    assert not by_t[3].success  # the fault cost a turn: 3 '+' need 4 turns
    assert by_t[4].success and by_t[4].success_turn == 4 and by_t[4].unrecovered == 0
    assert by_t[6].mistake_kinds == ("env_action_failed",)


REPLY = ModelResponse(text="Action: +\n+", usage=Usage(input_tokens=10, output_tokens=2))


class CountingModel(ScriptedModel):
    """Answers '+' to every request; counts the requests sent through the async path."""

    def __init__(self) -> None:
        super().__init__(lambda messages, tools, notice: REPLY)
        self.async_calls = 0

    async def asend(self, request: ModelRequest) -> ModelResponse:
        self.async_calls += 1
        return await super().asend(request)


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_chat_model_agent(tmp_path: Path, use_async: bool) -> None:
    models: list[CountingModel] = []

    def factory() -> ChatModelEnvAgent:
        m = CountingModel()
        models.append(m)
        return ChatModelEnvAgent(m, usd_per_mtok_in=1e6, use_async=use_async)

    class PlusEnv(LineEnv):
        def step(self, action: str) -> Any:
            return super().step(action.strip().splitlines()[-1])

    tasks = [Task(task_id="t", make_env=lambda: PlusEnv(goal=2), seed=0)]
    run = Evaluator(factory, tasks, EvalConfig(budgets=(4,))).run(tmp_path / "r")
    (rec,) = run.records
    assert rec.success and rec.turns_used == 2
    assert (rec.input_tokens, rec.output_tokens, rec.cost_usd) == (20, 4, 20.0)
    model = next(m for m in models if m.calls)
    first, second = model.requests
    assert [m.role for m in first.messages] == ["system", "user"]
    assert first.messages[0].content == "Reach 2 with '+'."
    assert [m.role for m in second.messages] == ["system", "user", "assistant", "user"]
    assert first.notice == "Budget (v1): turn 1 of 4, 4 turns left including this one."
    assert model.async_calls == (2 if use_async else 0)  # the async agent was called async


def test_config_validation() -> None:
    for bad in (
        {"budgets": ()},
        {"budgets": (0,)},
        {"budgets": (2,), "samples": 0},
        {"budgets": (2,), "notice_format": "v9"},
        {"budgets": (2,), "fault_step": 0},
        {"budgets": (2,), "env_seed_mode": "x"},
    ):
        with pytest.raises(ConfigError):
            EvalConfig(**bad)
    with pytest.raises(ConfigError):
        Evaluator(RandomWalker, [], EvalConfig(budgets=(2,)))


class FlakyBlind(RandomWalker):
    """Budget-blind; its provider fails on the 4th call of some episodes."""

    def start(self, env: object, seed: int) -> None:
        super().start(env, seed)
        self.calls, self.fails = 0, seed % 2 == 0

    def act(self, observation: str, notice: str | None, turns_remaining: int | None) -> str:
        self.calls += 1
        if self.fails and self.calls == 4:
            from _eval_doubles import PROVIDER_DOWN

            raise PROVIDER_DOWN
        return "-"


def test_prefix_sharing_with_provider_errors(tmp_path: Path) -> None:
    tasks = line_tasks(3)
    cfg = EvalConfig(budgets=(2, 3, 4, 6), samples=4)
    a = Evaluator(FlakyBlind, tasks, cfg).run(tmp_path / "a")
    b = Evaluator(FlakyBlind, tasks, replace(cfg, prefix_sharing=False)).run(tmp_path / "b")
    assert [comparable(r) for r in a.records] == [comparable(r) for r in b.records]
    failures = {(r.budget, r.failure) for r in a.records}
    assert (3, "budget_exhausted") in failures and (4, "provider_error") in failures
    assert (6, "budget_exhausted") in failures  # episodes whose provider did not fail
    assert all(r.error for r in a.records if r.failure == "provider_error")
