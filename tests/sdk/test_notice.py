"""The budget notice: golden bytes, ephemeral injection, stable prompt prefix."""

from __future__ import annotations

import copy
import itertools
import json
import math
from collections.abc import Callable
from typing import Any

import pytest
from _sdk_doubles import FakeClock
from budgetmix import (
    DEFAULT_NOTICE_FORMAT,
    NOTICE_FORMATS,
    Budget,
    BudgetController,
    ConfigError,
    Hooks,
    LedgerState,
    NotifyEveryTurn,
    render_notice,
    with_notice_anthropic,
    with_notice_openai_chat,
    with_notice_openai_responses,
)
from hypothesis import given
from hypothesis import strategies as st

TURNS_ONLY = {
    "turns": 10,
    "tool_calls": None,
    "input_tokens": None,
    "output_tokens": None,
    "total_tokens": None,
    "cost_usd": None,
    "wall_seconds": None,
}
ALL_LIMITS = {
    "turns": 10,
    "tool_calls": 20,
    "input_tokens": 1000,
    "output_tokens": 500,
    "total_tokens": 2000,
    "cost_usd": 0.5,
    "wall_seconds": 60,
}


def _state(limits: dict[str, Any], turn: int, **used: float) -> LedgerState:
    counts = dict.fromkeys(limits, 0.0)
    counts.update(used)
    counts["turns"] = turn  # the turn in progress is already charged
    return LedgerState(limits=limits, used=counts, in_turn=True)


USED = {
    "tool_calls": 4,
    "input_tokens": 250,
    "output_tokens": 100,
    "total_tokens": 350,
    "cost_usd": 0.0123,
    "wall_seconds": 12.7,
}
OTHERS = (
    " Tool calls: 4 of 20 used. Input tokens: 250 of 1000 used. Output tokens: 100 of 500 used."
    " Tokens: 350 of 2000 used. Cost: $0.0123 of $0.5000 used. Time: 12s of 60s used."
)

GOLDEN = [
    ("v1", TURNS_ONLY, 1, {}, "Budget (v1): turn 1 of 10, 10 turns left including this one."),
    ("v1", TURNS_ONLY, 3, {}, "Budget (v1): turn 3 of 10, 8 turns left including this one."),
    ("v1", TURNS_ONLY, 9, {}, "Budget (v1): turn 9 of 10, 2 turns left including this one."),
    ("v1", TURNS_ONLY, 10, {}, "Budget (v1): turn 10 of 10, the final turn."),
    (
        "v1",
        ALL_LIMITS,
        3,
        USED,
        "Budget (v1): turn 3 of 10, 8 turns left including this one." + OTHERS,
    ),
    ("v1", ALL_LIMITS, 10, USED, "Budget (v1): turn 10 of 10, the final turn." + OTHERS),
    ("v1-compact", TURNS_ONLY, 1, {}, "[budget v1c] turn 1/10, 10 left"),
    ("v1-compact", TURNS_ONLY, 3, {}, "[budget v1c] turn 3/10, 8 left"),
    ("v1-compact", TURNS_ONLY, 10, {}, "[budget v1c] turn 10/10, final"),
    # the compact format carries the turn facts only, whatever else is limited
    ("v1-compact", ALL_LIMITS, 3, USED, "[budget v1c] turn 3/10, 8 left"),
    ("v1-compact", ALL_LIMITS, 10, USED, "[budget v1c] turn 10/10, final"),
]


@pytest.mark.parametrize(("fmt", "limits", "turn", "used", "expected"), GOLDEN)
def test_golden_bytes(
    fmt: str, limits: dict[str, Any], turn: int, used: dict[str, float], expected: str
) -> None:
    text = render_notice(_state(limits, turn, **used), fmt)
    assert text.encode("utf-8") == expected.encode("utf-8")
    # deterministic: same state, same bytes
    assert render_notice(_state(limits, turn, **used), fmt) == text


def test_formats_registry_and_default() -> None:
    assert DEFAULT_NOTICE_FORMAT == "v1"
    assert set(NOTICE_FORMATS) >= {"v1", "v1-compact"}
    with pytest.raises(ConfigError, match="v2"):
        render_notice(_state(TURNS_ONLY, 1), "v2")


def test_notice_wording_is_neutral() -> None:
    for fmt in NOTICE_FORMATS:
        for turn in (1, 5, 10):
            text = render_notice(_state(ALL_LIMITS, turn, **USED), fmt).lower()
            for imperative in ("must", "should", "hurry", "stop", "now ", "!"):
                assert imperative not in text, (fmt, text)


def test_controller_notices_count_down_to_the_final_turn(fake_clock: FakeClock) -> None:
    c = BudgetController(Budget(turns=3, tool_calls=5), clock=fake_clock)
    notices = []
    with c.episode() as ep:
        for turn in ep.turns(model="m"):
            notices.append(turn.notice)
            assert ep.notice == turn.notice
            ep.tool_batch(["t"])[0].succeed()
    assert notices == [
        "Budget (v1): turn 1 of 3, 3 turns left including this one. Tool calls: 0 of 5 used.",
        "Budget (v1): turn 2 of 3, 2 turns left including this one. Tool calls: 1 of 5 used.",
        "Budget (v1): turn 3 of 3, the final turn. Tool calls: 2 of 5 used.",
    ]


def test_compact_format_through_the_controller() -> None:
    c = BudgetController(Budget(turns=2), notice=NotifyEveryTurn(format="v1-compact"))
    with c.episode() as ep:
        got = [t.notice for t in ep.turns()]
    assert got == ["[budget v1c] turn 1/2, 2 left", "[budget v1c] turn 2/2, final"]


def test_grant_shows_the_new_total_and_is_an_event() -> None:
    c = BudgetController(Budget(turns=2))
    with c.episode() as ep:
        first = ep.begin_turn()
        assert first.notice == "Budget (v1): turn 1 of 2, 2 turns left including this one."
        ep.grant(turns=3)
        second = ep.begin_turn()
        assert second.notice == "Budget (v1): turn 2 of 5, 4 turns left including this one."
        ep.finish(success=True)
    assert ep.result is not None
    extended = [e for e in ep.result.events if e.kind == "extended"]
    assert len(extended) == 1
    assert extended[0].turn == 1
    assert extended[0].detail == {"added_turns": 3, "turns_limit": 5}
    assert ep.result.limits["turns"] == 5


@pytest.mark.parametrize(
    "bad", [{"turns": 0}, {"turns": -1}, {"turns": float("nan")}, {"turns": 1.5}, {"x": 1}]
)
def test_grant_rejects_bad_amounts_and_leaves_limits_alone(bad: dict[str, float]) -> None:
    c = BudgetController(Budget(turns=2))
    with c.episode() as ep:
        with pytest.raises(ConfigError):
            ep.grant(**bad)
        with pytest.raises(ConfigError, match="tool_calls"):
            ep.grant(tool_calls=1)  # unlimited: nothing to extend
        assert ep.ledger.limit("turns") == 2
        assert ep.grants == 0


# -- injection never mutates the caller's history ------------------------------------
def _chat_history() -> list[Any]:
    return [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Add 2 and 3."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "function": {"name": "add", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "5"},
    ]


def _responses_history() -> list[Any]:
    return [
        {"role": "user", "content": "Add 2 and 3."},
        {"type": "function_call", "call_id": "c1", "name": "add", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "5"},
    ]


def _anthropic_history() -> list[Any]:
    return [
        {"role": "user", "content": "Add 2 and 3."},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "add"}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "5"}]},
    ]


SHAPES: list[tuple[str, Callable[[], list[Any]]]] = [
    ("openai_chat", _chat_history),
    ("openai_responses", _responses_history),
    ("anthropic", _anthropic_history),
]


@pytest.mark.parametrize(("shape", "history"), SHAPES)
def test_injection_leaves_the_callers_list_unchanged(
    shape: str, history: Callable[[], list[Any]]
) -> None:
    c = BudgetController(Budget(turns=3))
    messages = history()
    before = copy.deepcopy(messages)
    with c.episode() as ep:
        turn = ep.begin_turn()
        request = getattr(turn, shape)(messages)
    assert messages == before
    assert request is not messages
    assert json.dumps(request).count("Budget (v1): turn 1 of 3") == 1
    assert "Budget (v1)" not in json.dumps(messages)


def test_anthropic_notice_is_a_text_block_after_the_tool_results() -> None:
    request = with_notice_anthropic(_anthropic_history(), "N")
    assert request[-1]["role"] == "user"
    assert request[-1]["content"] == [
        {"type": "tool_result", "tool_use_id": "c1", "content": "5"},
        {"type": "text", "text": "N"},
    ]
    as_str = with_notice_anthropic([{"role": "user", "content": "hi"}], "N")
    assert as_str == [  # the string stays as the next request sends it (prompt cache)
        {"role": "user", "content": "hi"},
        {"role": "user", "content": [{"type": "text", "text": "N"}]},
    ]
    after_assistant = with_notice_anthropic([{"role": "assistant", "content": "x"}], "N")
    assert after_assistant[-1] == {"role": "user", "content": [{"type": "text", "text": "N"}]}


def test_openai_helpers_append_a_trailing_user_message() -> None:
    assert with_notice_openai_chat([], "N") == [{"role": "user", "content": "N"}]
    assert with_notice_openai_responses("hi", "N") == [
        {"role": "user", "content": "hi"},
        {"role": "user", "content": "N"},
    ]
    items = _responses_history()
    out = with_notice_openai_responses(items, "N")
    assert out[:-1] == items and out[-1] == {"role": "user", "content": "N"}


def test_silent_notice_policy_sends_the_history_as_is() -> None:
    class Never:
        format = "v1"

        def should_notify(self, state: LedgerState) -> bool:
            return False

    c = BudgetController(Budget(turns=2), notice=Never())
    with c.episode() as ep:
        turn = ep.begin_turn()
        assert turn.notice is None
        assert turn.openai_chat(_chat_history()) == _chat_history()
        assert turn.anthropic(_anthropic_history()) == _anthropic_history()
        assert turn.openai_responses("hi") == "hi"
        assert ep.render_notice().startswith("Budget (v1): turn 1 of 2")


# -- the prompt prefix stays byte-identical from turn to turn ------------------------
def _render_stream(request: list[Any]) -> bytes:
    """Serialise a request the way a chat template lays it out: one line per content
    block (a message with string content is one block), in order."""
    lines: list[str] = []
    for item in request:
        content = item.get("content") if isinstance(item, dict) else None
        if isinstance(content, list):
            head = {k: v for k, v in item.items() if k != "content"}
            for block in content:
                lines.append(json.dumps({**head, "block": block}, sort_keys=True))
        else:
            lines.append(json.dumps(item, sort_keys=True))
    return "".join(line + "\n" for line in lines).encode()


def _bytes_before_notice(request: list[Any], notice: str) -> bytes:
    stream = _render_stream(request)
    marker = json.dumps(notice)[1:-1].encode()
    at = stream.index(marker)
    return stream[: stream.rindex(b"\n", 0, at) + 1]


def _append_step(shape: str, history: list[Any], n: int) -> None:
    """What the caller appends after turn ``n``: the reply and the tool output."""
    if shape == "openai_chat":
        history.append(
            {"role": "assistant", "tool_calls": [{"id": f"c{n}", "function": {"name": "f"}}]}
        )
        history.append({"role": "tool", "tool_call_id": f"c{n}", "content": f"out {n}"})
    elif shape == "openai_responses":
        history.append({"type": "function_call", "call_id": f"c{n}", "name": "f"})
        history.append({"type": "function_call_output", "call_id": f"c{n}", "output": f"{n}"})
    else:
        history.append(
            {"role": "assistant", "content": [{"type": "tool_use", "id": f"c{n}", "name": "f"}]}
        )
        history.append(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"c{n}"}]}
        )


@pytest.mark.parametrize(("shape", "history"), SHAPES)
def test_prefix_before_the_notice_is_identical_across_turns(
    shape: str, history: Callable[[], list[Any]]
) -> None:
    c = BudgetController(Budget(turns=5, tool_calls=10))
    messages = history()
    requests: list[tuple[bytes, bytes, str]] = []
    with c.episode() as ep:
        for turn in ep.turns(model="m"):
            assert turn.notice is not None
            request = getattr(turn, shape)(messages)
            before = _bytes_before_notice(request, turn.notice)
            # the notice sits after the latest observation: everything before it is history
            assert before == _render_stream(messages)
            requests.append((before, _render_stream(request), turn.notice))
            ep.tool_batch(["f"])[0].succeed()
            _append_step(shape, messages, turn.number)
    assert len(requests) == 5
    for (before_n, _, notice_n), (_, stream_next, _) in itertools.pairwise(requests):
        assert stream_next.startswith(before_n)
        # no notice is left behind in history: the old one never reappears
        assert json.dumps(notice_n)[1:-1].encode() not in stream_next


@given(
    total=st.integers(min_value=1, max_value=10_000),
    turn=st.integers(min_value=1, max_value=10_000),
    fraction=st.floats(min_value=0.0, max_value=1.0, exclude_max=True),
)
def test_last_share_rounds_up_and_keeps_the_final_turn(
    total: int, turn: int, fraction: float
) -> None:
    # the shared rule behind warn_fraction and NotifyWhenAtMost(fraction=...), checked
    # against its definition: turns left <= max(1, ceil(fraction * total))
    state = _state({**TURNS_ONLY, "turns": total}, min(turn, total))
    expected = state.turns_remaining <= max(1, math.ceil(fraction * total))
    assert state.in_last_share(fraction) is expected


def test_warning_fires_on_the_first_turn_within_the_share() -> None:
    warned: list[int] = []

    class Record(Hooks):
        def on_budget_warning(self, episode: Any, state: LedgerState) -> None:
            warned.append(state.turn_number)

    c = BudgetController(Budget(turns=10), warn_fraction=0.25, hooks=[Record()])
    with c.episode() as ep:
        for _ in ep.turns():
            pass
    assert warned == [8]  # ceil(0.25 * 10) = 3 turns left: turns 8, 9 and 10; warned once
