"""Recorded episodes: the JSONL format, its validation, and SFT rows in the deployed layout."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _layout_fixtures import TEMPLATES, build_bpe_tokenizer
from budgetmix import Budget, BudgetController, NotifyEveryTurn
from budgetmix.adapters import run_agent
from budgetmix.adapters.base import ChatMessage
from budgetmix.adapters.chat_template import ChatTemplate
from budgetmix.adapters.testing import ScriptedModel, tool_call, tool_calls
from budgetmix.exceptions import ConfigError
from budgetmix.training.data.recordings import (
    RecordedEpisode,
    _with_notices,
    episode_record,
    read_episodes,
    recorded_rollouts,
    write_episodes,
)
from budgetmix.training.envs.tool_env import ToolEnv, ToolResult, env_tool


class Adder(ToolEnv):
    name = "adder"

    def instructions(self) -> str:
        return "Reach the target with add."

    def start(self, seed: int) -> str:
        self.target, self.value = 3, 0
        return "Target: 3"

    @env_tool
    def add(self, n: int) -> ToolResult:
        """Add n."""
        self.value += n
        ok = self.value == self.target
        return ToolResult(output=f"value {self.value}", done=ok, success=ok, progress=True)


def _run(placement: str = "ephemeral") -> tuple[Any, Adder]:
    env = Adder()
    task = env.reset(0)
    model = ScriptedModel(
        [
            tool_calls(tool_call("add", {"n": 1}, id="c1")),
            tool_calls(tool_call("add", "{bad", id="c2")),
            tool_calls(tool_call("add", {"n": 2}, id="c3")),  # its result ends the episode
        ]
    )
    budget: Any = Budget(turns=5)
    if placement == "observation":
        budget = BudgetController(
            Budget(turns=5), notice=NotifyEveryTurn(format="v1-compact", placement="observation")
        )
    run = run_agent(
        model, env.controller_tools(), task, budget, system=env.instructions(), judge=env.judge
    )
    return run, env


def test_a_run_round_trips_through_the_file(tmp_path: Path) -> None:
    run, env = _run()
    record = episode_record(run, env.controller_tools())
    assert record.budget_turns == 5 and record.status == "success"
    assert [t.name for t in record.tools] == ["add"]
    path = write_episodes(tmp_path / "episodes.jsonl", [record, record])
    assert read_episodes(path) == [record, record]
    line = json.loads(path.read_text().splitlines()[0])
    assert line["format"] == "budgetmix.episode.v1"
    calls = [m for m in line["messages"] if m.get("tool_calls")]
    assert calls[1]["tool_calls"][0]["arguments"] == "{bad"  # kept verbatim


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", r"episodes.jsonl:2: "),
        ('{"format": "other"}', r"episodes.jsonl:2: not a budgetmix.episode.v1 object"),
        (
            '{"format": "budgetmix.episode.v1", "messages": [{"role": "robot"}]}',
            r"episodes.jsonl:2: messages\[0\]: expected an object with a role",
        ),
        (
            '{"format": "budgetmix.episode.v1", "messages": [{"role": "user", "content": "x"}]}',
            "no assistant message",
        ),
        (
            '{"format": "budgetmix.episode.v1", "budget_turns": 0, "messages": []}',
            "budget_turns",
        ),
    ],
)
def test_bad_lines_are_named(tmp_path: Path, line: str, message: str) -> None:
    run, env = _run()
    path = write_episodes(
        tmp_path / "episodes.jsonl", [episode_record(run, env.controller_tools())]
    )
    with path.open("a") as f:
        f.write(line + "\n")
    with pytest.raises(ConfigError, match=message):
        read_episodes(path)


def test_an_empty_or_missing_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(ConfigError, match="holds no episode"):
        read_episodes(tmp_path / "empty.jsonl")
    with pytest.raises(ConfigError, match="cannot read"):
        read_episodes(tmp_path / "missing.jsonl")


def _masked_text(template: ChatTemplate, ids: tuple[int, ...], mask: tuple[int, ...]) -> str:
    return template.decode([t for t, m in zip(ids, mask, strict=True) if m])


def test_notices_put_back_are_what_the_controller_keeps_under_observation_placement() -> None:
    ephemeral, env = _run("ephemeral")
    observed, _ = _run("observation")
    record = episode_record(ephemeral, env.controller_tools())
    assert not any("[budget" in m.content for m in ephemeral.messages)
    assert _with_notices(record, "v1-compact", 1) == list(observed.messages)
    kept = episode_record(observed, env.controller_tools(), notice_placement="observation")
    assert _with_notices(kept, "v1-compact", 1) == list(observed.messages)


@pytest.mark.parametrize("placement", ["ephemeral", "observation"])
def test_rows_are_the_deployed_rendering_with_loss_on_assistant_tokens(placement: str) -> None:
    pytest.importorskip("transformers")
    template = ChatTemplate(build_bpe_tokenizer("qwen"))
    run, env = _run(placement)
    record = episode_record(run, env.controller_tools(), notice_placement=placement)
    (row,) = recorded_rollouts(
        [record], template, notice_format="v1-compact", max_total_tokens=4096
    )
    # token for token the template's rendering of what the controller keeps under
    # placement "observation", tools included, as one string encodes
    messages = list(_run("observation")[0].messages)
    full = template.render(messages, record.tools, add_generation_prompt=False)
    ids = list(row.prompt_ids + row.response_ids)
    assert ids == template.encode(full)[: len(ids)]
    assert '"name": "add"' in template.decode(row.prompt_ids)  # the tool schema is shown
    replies = [(i, m) for i, m in enumerate(messages) if m.role == "assistant"]
    expected = "".join(template.assistant_text(messages[:i], m, record.tools) for i, m in replies)
    learned = [t for t, m in zip(row.response_ids, row.response_mask, strict=True) if m]
    assert template.decode(learned) == expected
    assert "[budget v1c] turn 1/5, 5 left" in template.decode(row.prompt_ids)
    assert row.success and row.num_turns == 3 and row.budget.turns == 5


def test_a_template_that_is_not_prefix_stable_gets_one_row_per_turn() -> None:
    pytest.importorskip("transformers")
    tokenizer = build_bpe_tokenizer("qwen")
    # Qwen3's official template drops the reasoning of earlier turns: not prefix-stable
    template = ChatTemplate(tokenizer, (TEMPLATES / "Qwen-Qwen3-0.6B.jinja").read_text())
    run, env = _run()
    rows = recorded_rollouts(
        [episode_record(run, env.controller_tools())],
        template,
        notice_format="v1-compact",
        max_total_tokens=4096,
    )
    assert len(rows) == 3 and all(all(r.response_mask) for r in rows)
    messages = _with_notices(episode_record(run, env.controller_tools()), "v1-compact", 1)
    replies = [i for i, m in enumerate(messages) if m.role == "assistant"]
    for row, i in zip(rows, replies, strict=True):  # each row: what deployment renders at turn i
        prompt = template.render(messages[:i], env.tool_specs(), add_generation_prompt=True)
        assert list(row.prompt_ids) == template.encode(prompt)
        reply = template.assistant_text(messages[:i], messages[i], env.tool_specs())
        assert template.decode(row.response_ids) == reply
    with pytest.raises(ConfigError, match="over max_total_tokens=300"):
        recorded_rollouts(
            [episode_record(run, env.controller_tools())],
            template,
            notice_format="v1-compact",
            max_total_tokens=300,
        )


def test_record_validation() -> None:
    reply = ChatMessage(role="assistant", content="hi")
    with pytest.raises(ConfigError, match="notice_placement"):
        RecordedEpisode(messages=(reply,), notice_placement="sideways")
    with pytest.raises(ConfigError, match="no assistant message"):
        RecordedEpisode(messages=(ChatMessage(role="user", content="hi"),))
