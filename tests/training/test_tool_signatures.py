"""Any legal tool signature works on every path (issue 26 items 1 and 2).

A tool whose parameters are named like the library's own arguments (``name``, ``self``,
``tool_name``, ``call_id``, ``arguments``, ``env``, ``kwargs`` ...) is run in-process
(``call_tool``), under ``run_agent`` with ``env.controller_tools()``, in a recording and
its SFT rows, and in a server rollout: each reads the arguments the model wrote. A tool
that raises at deployment is a ``tool_error`` (never a success whose observation is the
error), its recording marks the call, and SFT from recordings skips the episode.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import httpx
import pytest
from budgetmix import Budget, EpisodeStatus
from budgetmix.adapters import run_agent
from budgetmix.adapters.testing import ScriptedModel, final_answer, tool_call, tool_calls
from budgetmix.environment import Task
from budgetmix.exceptions import ConfigError
from budgetmix.policies.samplers import FixedBudget
from budgetmix.training.data.recordings import (
    episode_record,
    read_episodes,
    recorded_rollouts,
    write_episodes,
)
from budgetmix.training.envs.tool_env import ToolEnv, ToolResult, env_tool
from budgetmix.training.rollouts.rollout import EpisodeSpec
from budgetmix.training.serving.server_rollout import ServerRollouts

HOSTILE = ("name", "self", "tool_name", "call_id", "arguments", "env", "kwargs", "args", "fn")
ARGS = {n: f"<{n}>" for n in HOSTILE}
EXPECTED = " ".join(f"{n}=<{n}>" for n in HOSTILE)


def _echo_source() -> str:
    # the instance is ``me``, so that ``self`` can be a parameter of the tool
    params = ", ".join(f"{n}: str" for n in HOSTILE)
    shown = ", ".join(f"{n}={n}" for n in HOSTILE)
    return (
        f"def echo(me, {params}) -> ToolResult:\n"
        "    '''Echo every argument (the task is done).'''\n"
        f"    got = dict({shown})\n"
        "    text = ' '.join(f'{k}={v}' for k, v in got.items())\n"
        "    return ToolResult(output=text, done=True, success=True)\n"
    )


_scope: dict[str, Any] = {"ToolResult": ToolResult}
exec(_echo_source(), _scope)


class Hostile(ToolEnv):
    """One tool whose parameters share names with the library's own arguments."""

    name = "hostile"
    echo = env_tool(_scope["echo"])

    def instructions(self) -> str:
        return "Call echo."

    def start(self, seed: int) -> str:
        return "Echo everything."


class Crashing(ToolEnv):
    """A tool that raises (a bug of the environment), then a reply that ends the episode."""

    name = "crashing"

    def start(self, seed: int) -> str:
        return "Look."

    @env_tool
    def look(self, name: str) -> str:
        """Look at something."""
        raise KeyError(name)

    def reply(self, text: str) -> ToolResult:
        return ToolResult(output="ok", done=True, success=True)


def _run(env: ToolEnv, script: list[Any], turns: int = 3) -> Any:
    task = env.reset(0)
    return run_agent(
        ScriptedModel(script),
        env.controller_tools(),
        task,
        Budget(turns=turns),
        system=env.instructions(),
        judge=env.judge,
    )


def test_the_schema_names_every_parameter_and_in_process_calls_read_them() -> None:
    env = Hostile()
    (spec,) = env.tool_specs()
    assert list(spec.parameters["properties"]) == list(HOSTILE)
    env.reset(0)
    result = env.call_tool("echo", json.dumps(ARGS))
    assert result.label.mistake is None and result.observation == EXPECTED and result.success


def test_under_run_agent_every_argument_reaches_the_tool() -> None:
    env = Hostile()
    run = _run(env, [tool_calls(tool_call("echo", ARGS, id="c0"))])
    assert run.result.mistakes == ()
    (tool,) = [m for m in run.messages if m.role == "tool"]
    assert tool.content == EXPECTED and not tool.is_error
    assert run.success and run.turns_used == 1 and env.success


def test_a_recording_of_it_keeps_the_arguments_and_trains(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from _layout_fixtures import build_bpe_tokenizer
    from budgetmix.adapters.chat_template import ChatTemplate

    env = Hostile()
    run = _run(env, [tool_calls(tool_call("echo", ARGS, id="c0"))])
    path = write_episodes(tmp_path / "e.jsonl", [episode_record(run, env.controller_tools())])
    (record,) = read_episodes(path)
    assert [m.content for m in record.messages if m.role == "tool"] == [EXPECTED]
    assert record.status == "success" and record.tool_errors == ()
    template = ChatTemplate(build_bpe_tokenizer("qwen"))
    (row,) = recorded_rollouts([record], template, notice_format="v1", max_total_tokens=4096)
    text = template.decode(row.prompt_ids + row.response_ids)
    assert row.success and all(f'"{n}": "<{n}>"' in text for n in HOSTILE)


def _tool_call_server(request: httpx.Request) -> httpx.Response:
    call = {"id": "c0", "type": "function", "function": {"name": "echo"}}
    call["function"]["arguments"] = json.dumps(ARGS)
    ids = [7, 8]
    body = {
        "id": "c",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "prompt_token_ids": [1, 2, 3],
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                "finish_reason": "tool_calls",
                "token_ids": ids,
                "logprobs": {
                    "content": [
                        {"token": f"token_id:{t}", "logprob": -0.5, "top_logprobs": []}
                        for t in ids
                    ]
                },
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }
    return httpx.Response(200, json=body)


def test_a_server_rollout_runs_it_with_the_arguments_the_server_sent() -> None:
    driver = ServerRollouts(
        "http://127.0.0.1:9/v1", "m", transport=httpx.MockTransport(_tool_call_server)
    )
    task = Task(task_id="hostile-0", seed=0, make_env=Hostile)
    spec = EpisodeSpec(task=task, budget=FixedBudget(3).sample(random.Random(0)))
    (row,) = driver([spec])
    # one turn: the echo's result ends the episode with the environment's reward
    assert row.termination == "success" and row.reward == 1.0 and row.num_turns == 1
    assert row.steps[0].label.mistake is None and row.steps[0].observation == EXPECTED


def test_a_tool_that_raises_at_deployment_is_a_tool_error_and_sft_skips_it(
    tmp_path: Path,
) -> None:
    pytest.importorskip("transformers")
    from _layout_fixtures import build_bpe_tokenizer
    from budgetmix.adapters.chat_template import ChatTemplate

    env = Crashing()
    run = _run(env, [tool_calls(tool_call("look", {"name": "x"}, id="c0")), final_answer("ok")])
    assert [m.kind for m in run.result.mistakes] == ["tool_error"]
    (tool,) = [m for m in run.messages if m.role == "tool"]
    assert tool.is_error and tool.content == "Error: KeyError: 'x'"
    # the environment's own call path says the same
    env.reset(0)
    assert env.call_tool("look", '{"name": "x"}').label.mistake == "tool_error"
    # the recording marks the call; SFT skips such an episode unless asked to keep it
    hostile = Hostile()
    good = _run(hostile, [tool_calls(tool_call("echo", ARGS, id="c0"))])
    records = [episode_record(run, env.controller_tools())]
    records.append(episode_record(good, hostile.controller_tools()))
    path = write_episodes(tmp_path / "e.jsonl", records)
    crashed, clean = read_episodes(path)
    assert crashed.tool_errors == ("c0",) and clean.tool_errors == ()
    line = json.loads(path.read_text().splitlines()[0])
    assert line["tool_errors"] == ["c0"]
    template = ChatTemplate(build_bpe_tokenizer("qwen"))
    rows = recorded_rollouts(
        [crashed, clean], template, notice_format="v1", max_total_tokens=4096
    )
    assert len(rows) == 1 and '"echo"' in template.decode(rows[0].response_ids)
    kept = recorded_rollouts(
        [crashed, clean], template, notice_format="v1", max_total_tokens=4096, tool_errors="keep"
    )
    assert len(kept) == 2
    with pytest.raises(ConfigError, match="tool_errors"):
        recorded_rollouts([crashed], template, notice_format="v1", max_total_tokens=4096)


def test_a_tool_that_raises_never_ends_the_episode_as_a_success() -> None:
    class Fails(Crashing):
        def reply(self, text: str) -> ToolResult:
            return ToolResult(output="no", done=True, success=False)

    run = _run(Fails(), [tool_calls(tool_call("look", {"name": "x"}, id="c0")), final_answer("ok")])
    assert run.result.status is EpisodeStatus.FAILED and not run.success
