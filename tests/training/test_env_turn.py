"""training/rollouts/env_turn.py: the one home of a turn's reply row and environment answer."""

from __future__ import annotations

from typing import Any

from budgetmix.training.envs.tool_env import ToolEnv, ToolResult, env_tool
from budgetmix.training.rollouts.env_turn import combined, environment_answer, with_notice


class Finish(ToolEnv):
    """One tool that ends the episode, one that does not."""

    def start(self, seed: int) -> str:
        return "finish it"

    @env_tool
    def note(self, text: str) -> str:
        """Note something."""
        return f"noted {text}"

    @env_tool
    def finish(self) -> ToolResult:
        """End the episode."""
        return ToolResult(output="done", done=True, success=True)


def _reply(*names: str) -> dict[str, Any]:
    calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": {}}}
        for i, n in enumerate(names)
    ]
    for call in calls:
        if call["function"]["name"] == "note":
            call["function"]["arguments"] = {"text": "x"}
    return {"role": "assistant", "content": "", "tool_calls": calls}


def test_one_tool_message_per_call_in_call_order() -> None:
    env = Finish()
    env.reset(0)
    result, answers = environment_answer(env, _reply("note", "note"), tools=True)
    assert [(a["role"], a["tool_call_id"], a["content"]) for a in answers] == [
        ("tool", "c0", "noted x"),
        ("tool", "c1", "noted x"),
    ]
    assert result.observation == "noted x\nnoted x" and not result.done
    assert with_notice(answers, "N")[-1]["content"] == "noted x\nN"
    assert answers[-1]["content"] == "noted x"  # the input is not mutated


def test_calls_after_the_one_that_ends_the_episode_are_not_run() -> None:
    env = Finish()
    env.reset(0)
    result, answers = environment_answer(env, _reply("finish", "note"), tools=True)
    assert [a["tool_call_id"] for a in answers] == ["c0"]
    assert result.done and result.success and env.steps == 1


def test_a_reply_without_calls_is_a_user_message() -> None:
    env = Finish()
    env.reset(0)
    result, answers = environment_answer(env, {"role": "assistant", "content": "hi"}, tools=True)
    assert answers == [{"role": "user", "content": result.observation}] and result.done


def test_combined_takes_the_first_mistake_and_sums_rewards() -> None:
    env = Finish()
    env.reset(0)
    bad = env.call_tool("note", "{}")  # a missing argument: a labelled mistake
    good = env.call_tool("finish", "{}")
    turn = combined([bad, good])
    assert turn.label == bad.label and turn.label.mistake is not None
    assert turn.done and turn.success and turn.reward == bad.reward + good.reward
