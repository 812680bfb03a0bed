"""Notice placement: ephemeral vs. in the latest observation (kept), and the policy field."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from budgetmix import (
    NOTICE_PLACEMENTS,
    ConfigError,
    NotifyEveryTurn,
    place_notice_openai_chat,
    with_notice_openai_chat,
)
from budgetmix.notice import NOTICE_SEPARATOR, append_notice, observation_index
from budgetmix.policies import AnyOf, NotifyFinalTurn, NotifyWhenAtMost, notice_from_config
from budgetmix.policy import notice_placement

NOTICE = "Budget (v1): turn 2 of 3, 2 turns left including this one."


def _tool_turn() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "task"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                {"id": "b", "type": "function", "function": {"name": "g", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "r1"},
        {"role": "tool", "tool_call_id": "b", "content": "r2"},
    ]


def test_ephemeral_is_the_trailing_user_message() -> None:
    msgs = _tool_turn()
    assert place_notice_openai_chat(msgs, NOTICE, "ephemeral") == with_notice_openai_chat(
        msgs, NOTICE
    )
    assert place_notice_openai_chat(msgs, NOTICE, "ephemeral")[-1] == {
        "role": "user",
        "content": NOTICE,
    }


def test_observation_goes_into_the_last_tool_message_and_the_input_is_untouched() -> None:
    msgs = _tool_turn()
    before = copy.deepcopy(msgs)
    out = place_notice_openai_chat(msgs, NOTICE, "observation")
    assert msgs == before
    assert len(out) == len(msgs)
    assert out[:4] == msgs[:4]
    assert out[4] == {"role": "tool", "tool_call_id": "b", "content": "r2\n" + NOTICE}
    assert NOTICE_SEPARATOR == "\n"
    assert append_notice("r2", NOTICE) == out[4]["content"]


def test_observation_without_tools_goes_into_the_latest_user_message() -> None:
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "task"}]
    out = place_notice_openai_chat(msgs, NOTICE, "observation")
    assert out == [msgs[0], {"role": "user", "content": "task\n" + NOTICE}]
    later = [*out, {"role": "assistant", "content": "go"}, {"role": "user", "content": "obs"}]
    again = place_notice_openai_chat(later, NOTICE, "observation")
    # earlier notices stay as they were: only the turn's own observation changes
    assert again[:3] == later[:3]
    assert again[3]["content"] == "obs\n" + NOTICE


def test_observation_with_no_observation_in_the_turn_adds_a_user_message() -> None:
    msgs = [{"role": "user", "content": "task"}, {"role": "assistant", "content": "x"}]
    out = place_notice_openai_chat(msgs, NOTICE, "observation")
    assert out == [*msgs, {"role": "user", "content": NOTICE}]
    assert place_notice_openai_chat([], NOTICE, "observation") == [
        {"role": "user", "content": NOTICE}
    ]


def test_observation_in_content_parts() -> None:
    parts = [{"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": "u"}}]
    out = place_notice_openai_chat([{"role": "user", "content": parts}], NOTICE, "observation")
    assert out[0]["content"] == [*parts, {"type": "text", "text": "\n" + NOTICE}]
    text_last = [{"type": "text", "text": "see"}]
    out = place_notice_openai_chat([{"role": "user", "content": text_last}], NOTICE, "observation")
    assert out[0]["content"] == [{"type": "text", "text": "see\n" + NOTICE}]


def test_observation_index_rules() -> None:
    assert observation_index(["system", "user"]) == 1
    assert observation_index(["system", "user", "assistant", "tool", "tool"]) == 4
    assert observation_index(["user", "assistant", "tool", "user"]) == 2
    assert observation_index(["user", "assistant"]) is None
    assert observation_index([]) is None


def test_unknown_placement_is_refused() -> None:
    with pytest.raises(ConfigError, match="unknown notice placement 'inline'"):
        place_notice_openai_chat([], NOTICE, "inline")  # type: ignore[arg-type]


def test_rules_carry_a_placement_through_their_config() -> None:
    assert NOTICE_PLACEMENTS == ("ephemeral", "observation")
    assert NotifyEveryTurn().placement == "ephemeral"
    rule = NotifyWhenAtMost(3, placement="observation")
    assert rule.to_config() == {
        "kind": "at_most",
        "turns": 3,
        "format": "v1",
        "placement": "observation",
    }
    assert notice_from_config(rule.to_config()) == rule
    assert notice_from_config({"kind": "final_turn", "placement": "observation"}) == (
        NotifyFinalTurn(placement="observation")
    )
    both = NotifyFinalTurn(placement="observation") | NotifyWhenAtMost(2, placement="observation")
    assert both.placement == "observation"
    assert notice_from_config(both.to_config()) == both


def test_bad_placements_name_the_field() -> None:
    with pytest.raises(ConfigError, match=r"NotifyEveryTurn\.placement must be one of"):
        NotifyEveryTurn(placement="inline")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"notice\.placement must be one of"):
        notice_from_config({"kind": "every_turn", "placement": "inline"})
    with pytest.raises(ConfigError, match="mix notice placements"):
        AnyOf((NotifyFinalTurn(), NotifyWhenAtMost(2, placement="observation")))


class _OldPolicy:
    format = "v1"

    def should_notify(self, state: object) -> bool:
        return True


class _BadPolicy(_OldPolicy):
    placement = "inline"


def test_notice_placement_reads_any_policy() -> None:
    assert notice_placement(_OldPolicy()) == "ephemeral"
    assert notice_placement(NotifyEveryTurn(placement="observation")) == "observation"
    with pytest.raises(ConfigError, match=r"_BadPolicy\.placement"):
        notice_placement(_BadPolicy())
