"""ToolEnv: tools as typed methods, labelled steps, the text protocol and deployment tools."""

from __future__ import annotations

import json
from typing import Any, Literal

import pytest
from budgetmix import Budget
from budgetmix.adapters import run_agent
from budgetmix.adapters.testing import ScriptedModel, tool_call, tool_calls
from budgetmix.environment import Environment, EnvStateError
from budgetmix.exceptions import ConfigError
from budgetmix.training.envs.tool_env import (
    EPISODE_OVER,
    ToolCallEnvironment,
    ToolEnv,
    ToolMistake,
    ToolResult,
    env_tool,
    is_tool_env,
)


class Counter(ToolEnv):
    """Reach a target by adding 1 to 3 at a time, then submit."""

    name = "counter"

    def instructions(self) -> str:
        return "Reach the target with add, then submit."

    def start(self, seed: int) -> str:
        self.target, self.value = 3 + seed % 4, 0
        return f"Target: {self.target}"

    @env_tool
    def add(self, amount: int) -> ToolResult:
        """Add to the counter.

        Args:
            amount: 1, 2 or 3.
        """
        if not 1 <= amount <= 3:
            raise ToolMistake(f"amount must be 1-3, got {amount}")
        before = abs(self.target - self.value)
        self.value += amount
        return ToolResult(
            output=f"value {self.value}", progress=abs(self.target - self.value) < before
        )

    @env_tool(name="submit")
    def submit_value(self) -> ToolResult:
        """Submit the counter's value (ends the episode)."""
        ok = self.value == self.target
        return ToolResult(output="correct" if ok else "wrong", done=True, success=ok)

    @env_tool
    def peek(self, what: Literal["value", "target"]) -> dict[str, int]:
        """Read the value or the target."""
        if what == "value":
            return {"value": self.value}
        raise RuntimeError("target is secret")


def test_protocols_and_specs() -> None:
    env = Counter()
    assert isinstance(env, ToolCallEnvironment) and isinstance(env, Environment)
    assert is_tool_env(env) and not is_tool_env(object())
    specs = env.tool_specs()
    assert [s.name for s in specs] == ["add", "submit", "peek"]
    add = specs[0]
    assert add.description == "Add to the counter."
    assert add.parameters["properties"]["amount"] == {
        "type": "integer",
        "description": "1, 2 or 3.",
    }
    assert add.parameters["required"] == ["amount"]
    assert specs[2].parameters["properties"]["what"]["enum"] == ["value", "target"]


def test_every_outcome_is_labelled() -> None:
    env = Counter()
    env.reset(0)
    cases = [
        (env.call_tool("nope", "{}"), False, "unknown_tool"),
        (env.call_tool("add", "{amount: 1}"), False, "invalid_tool_arguments"),
        (env.call_tool("add", '{"amount": "1"}'), False, "invalid_tool_arguments"),  # strict
        (env.call_tool("add", '{"amount": 9}'), True, "env_action_failed"),
        (env.call_tool("peek", '{"what": "target"}'), True, "tool_error"),
    ]
    for result, valid, mistake in cases:
        assert (result.label.valid, result.label.mistake) == (valid, mistake)
        assert not result.done and result.reward == 0.0
    assert cases[0][0].observation == "Unknown tool 'nope'. Available tools: add, peek, submit."
    assert cases[3][0].observation == "Error: ToolMistake: amount must be 1-3, got 9"
    assert cases[4][0].observation == "Error: RuntimeError: target is secret"
    ok = env.call_tool("add", '{"amount": 2}')
    assert ok.label == ok.label.__class__(progress=True) and ok.observation == "value 2"
    assert env.call_tool("peek", '{"what": "value"}').observation == '{"value":2}'
    assert env.steps == 7 and env.value == 2


def test_a_tool_ends_the_episode_with_its_reward() -> None:
    env = Counter()
    env.reset(0)
    env.call_tool("add", '{"amount": 3}')
    final = env.call_tool("submit", "")  # "" means no arguments, as providers send it
    assert (final.done, final.success, final.reward, final.observation) == (
        True,
        True,
        1.0,
        "correct",
    )
    with pytest.raises(EnvStateError):
        env.call_tool("add", '{"amount": 1}')
    env.reset(1)
    assert not env.done and env.steps == 0
    lost = env.call_tool("submit", "{}")
    assert lost.done and not lost.success and lost.reward == 0.0


def test_a_reply_without_a_tool_call_ends_the_episode_by_default() -> None:
    env = Counter()
    with pytest.raises(EnvStateError, match="reset"):
        env.respond("hi")
    env.reset(0)
    result = env.respond("I give up")
    assert (
        result.done and not result.success and result.label.detail == "replied without a tool call"
    )


def test_text_protocol_reads_hermes_blocks() -> None:
    env = Counter()
    env.reset(0)
    two = '<tool_call>{"name": "add", "arguments": {"amount": 9}}</tool_call>\n' + (
        '<tool_call>{"name": "add", "arguments": {"amount": 3}}</tool_call>'
    )
    result = env.step(two)
    assert result.observation == "Error: ToolMistake: amount must be 1-3, got 9\nvalue 3"
    assert result.label.mistake == "env_action_failed" and result.label.progress
    assert result.info["calls"] == 2
    done = env.step('<tool_call>{"name": "submit", "arguments": {}}</tool_call>')
    assert done.done and done.success


def test_bad_tool_declarations_fail_when_the_class_is_defined() -> None:
    with pytest.raises(ConfigError, match="synchronous"):

        class Async(ToolEnv):
            @env_tool
            async def go(self) -> str:
                return ""

    with pytest.raises(ConfigError, match="two tools are named 'a'"):

        class Twice(ToolEnv):
            @env_tool(name="a")
            def one(self) -> str:
                return ""

            @env_tool(name="a")
            def two(self) -> str:
                return ""

    class Plain(Counter):
        def peek(self, what: str) -> dict[str, int]:  # type: ignore[override]
            return {}

    assert [s.name for s in Plain().tool_specs()] == ["add", "submit"]
    assert Plain.name == "counter"

    class Unnamed(ToolEnv):
        pass

    assert Unnamed.name == "Unnamed" and Unnamed().tool_specs() == ()


def test_deployed_under_the_controller() -> None:
    env = Counter()
    task = env.reset(0)
    model = ScriptedModel(
        [
            tool_calls(tool_call("add", {"amount": 7})),
            tool_calls(tool_call("add", {"amount": 3})),
            tool_calls(tool_call("submit")),
        ]
    )
    run = run_agent(
        model,
        env.controller_tools(),
        task,
        Budget(turns=6),
        system=env.instructions(),
        judge=env.judge,
    )
    # the submit's result ends the episode (no further model call), as in training
    assert run.success and run.turns_used == 3 and env.success
    assert len(model.requests) == 3 and run.output == "correct"
    assert [m.kind for m in run.result.mistakes] == ["env_action_failed"]  # as in training
    assert len(run.result.recoveries) == 1
    tool_texts = [m.content for m in run.messages if m.role == "tool"]
    assert tool_texts[0] == "Error: ToolMistake: amount must be 1-3, got 7" and tool_texts[1:] == [
        "value 3",
        "correct",
    ]
    assert env._deployed_call("add", amount=1) == EPISODE_OVER


# -- the package's environments as tool environments -------------------------------------
def test_faulty_tools_is_a_tool_env_in_training_and_under_the_controller() -> None:
    from budgetmix.training.envs import FaultyToolsEnv, ToolCallError

    env = FaultyToolsEnv(hops=2, fail_at_steps={1})
    assert is_tool_env(env)
    assert [s.name for s in env.tool_specs()] == ["lookup", "list_keys", "answer"]
    env.reset(5)
    failed = env.call_tool("lookup", json.dumps({"key": env.start_key}))
    assert failed.label.mistake == "tool_error" and failed.observation.startswith(
        "Error: ToolCallError: lookup failed"
    )
    assert env.call_tool("lookup", '{"key": "nope"}').label.mistake == "invalid_tool_arguments"
    assert env.call_tool("lookup", "{}").label.valid is False  # schema: key is required
    text = env.step("I think I should look around")  # a reply: format mistake, goes on
    assert (text.label.mistake, text.label.valid, text.done) == ("model_format_error", False, False)
    for key in env.chain:
        assert env.call_tool("lookup", json.dumps({"key": key})).label.progress
    final = env.call_tool("answer", json.dumps({"value": env.answer}))
    assert final.success and final.reward == 1.0
    assert issubclass(ToolCallError, ToolMistake)

    deployed = FaultyToolsEnv(hops=2, flaky_p=0.0)
    task = deployed.reset(5)
    script = [
        tool_calls(tool_call("lookup", {"key": "zz"})),
        *(tool_calls(tool_call("lookup", {"key": k})) for k in deployed.chain),
        tool_calls(tool_call("answer", {"value": deployed.answer})),
    ]
    run = run_agent(
        ScriptedModel(script),
        deployed.controller_tools(),
        task,
        Budget(turns=8),
        judge=deployed.judge,
    )
    assert run.success and [m.kind for m in run.result.mistakes] == ["invalid_tool_arguments"]
    assert len(run.result.recoveries) == 1


def test_frozenlake_tools_moves_through_a_tool_and_its_demonstrator_calls_it() -> None:
    pytest.importorskip("gymnasium")
    from budgetmix.environment import unwrap as unwrap_env
    from budgetmix.training.envs import FrozenLakeTools, make_env
    from budgetmix.training.envs.agents import FrozenLakeDemonstrator

    env = make_env("frozenlake-tools", map_name="4x4", slippery=False)
    assert isinstance(env, FrozenLakeTools) and unwrap_env(env) is env.inner
    (spec,) = env.tool_specs()
    assert spec.name == "move"
    assert spec.parameters["properties"]["direction"]["enum"] == ["left", "down", "right", "up"]
    assert "call the move tool" in env.instructions()
    env.reset(0)
    edge = env.call_tool("move", '{"direction": "up"}')  # from S, the top row
    assert (edge.label.mistake, edge.label.valid, edge.done) == ("env_action_failed", True, False)
    assert env.call_tool("move", '{"direction": "north"}').label.mistake == "invalid_tool_arguments"

    class _Request:  # what the rollout hands a demonstrator: the env and its ledger state
        def __init__(self, turns_remaining: int) -> None:
            self.env = env
            self.state = type("S", (), {"turns_remaining": turns_remaining})()

    env.reset(0)
    demo = FrozenLakeDemonstrator(0.0, 0, tool_call=True)
    for turn in range(12):
        message: Any = demo(_Request(12 - turn))  # type: ignore[arg-type]
        (call,) = message["tool_calls"]
        assert call["function"]["name"] == "move" and message["role"] == "assistant"
        result = env.call_tool("move", json.dumps(call["function"]["arguments"]))
        assert result.label.mistake is None
        if result.done:
            break
    assert result.success and result.reward == 1.0 and env.inner.turns == 6
