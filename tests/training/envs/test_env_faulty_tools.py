"""FaultyToolsEnv labels and faults, tool functions."""

from __future__ import annotations

import json

import pytest
from budgetmix.environment import FaultInjection
from budgetmix.exceptions import ConfigError
from budgetmix.training.envs import FaultyToolsEnv, ToolCallError, make_tools


def lookup(key: str) -> str:
    return f"call lookup {json.dumps({'key': key})}"


def test_chain_lookup_and_answer() -> None:
    env = FaultyToolsEnv(hops=3)
    obs = env.reset(4)
    assert env.start_key in obs and len(env.chain) == 3
    for i, key in enumerate(env.chain):
        result = env.step(lookup(key))
        assert result.label.progress and result.label.mistake is None
        expected = f"see {env.chain[i + 1]}" if i + 1 < len(env.chain) else env.answer
        assert repr(expected) in result.observation
    assert not env.step(lookup(env.chain[0])).label.progress  # nothing new
    final = env.step(f"Reasoning...\nanswer {env.answer}")
    assert final.success and final.done and final.reward == 1.0 and final.label.progress


@pytest.mark.parametrize(
    ("action", "valid", "mistake"),
    [
        ("what now?", False, "model_format_error"),
        ("call fetch {}", False, "unknown_tool"),
        ("call lookup {key: k1}", False, "invalid_tool_arguments"),
        ('call lookup {"name": "k1"}', False, "invalid_tool_arguments"),
        ('call lookup {"key": "zz"}', True, "invalid_tool_arguments"),
        ("call list_keys {}", True, None),
    ],
)
def test_labels(action: str, valid: bool, mistake: str | None) -> None:
    env = FaultyToolsEnv()
    env.reset(0)
    result = env.step(action)
    assert (result.label.valid, result.label.mistake) == (valid, mistake)
    assert not result.done


def test_wrong_answer_ends_unless_configured() -> None:
    env = FaultyToolsEnv()
    env.reset(0)
    result = env.step("answer nothing")
    assert result.done and not result.success and result.label.detail == "wrong answer"
    env = FaultyToolsEnv(wrong_answer_ends=False)
    env.reset(0)
    assert not env.step("answer nothing").done


def test_fail_at_steps_then_recovery_counts_as_progress() -> None:
    env = FaultyToolsEnv(fail_at_steps={1, 2})
    env.reset(0)
    labels = [env.step(lookup(env.start_key)).label for _ in range(3)]
    assert [lb.mistake for lb in labels] == ["tool_error", "tool_error", None]
    assert [lb.progress for lb in labels] == [False, False, True]


def test_flaky_tool_is_seeded() -> None:
    def pattern(seed: int) -> list[str | None]:
        env = FaultyToolsEnv(flaky_p=0.5)
        env.reset(seed)
        return [env.step(lookup(env.start_key)).label.mistake for _ in range(20)]

    assert pattern(1) == pattern(1)
    assert pattern(1) != pattern(2)
    assert 2 <= pattern(1).count("tool_error") <= 18


def test_data_does_not_depend_on_fault_settings() -> None:
    a, b = FaultyToolsEnv(), FaultyToolsEnv(flaky_p=0.9, fail_at_steps={1})
    a.reset(11)
    b.reset(11)
    assert a.table == b.table and a.answer == b.answer


def test_tool_functions() -> None:
    env = FaultyToolsEnv(hops=2, fail_at_steps={1})
    env.reset(3)
    lookup_fn, list_keys, submit = make_tools(env)
    assert lookup_fn.__name__ == "lookup" and lookup_fn.__annotations__["key"] == "str"
    with pytest.raises(ToolCallError, match="failed"):
        lookup_fn(env.start_key)
    assert "see" in lookup_fn(env.start_key)
    assert env.chain[0] in list_keys()
    assert submit(env.answer) == "Correct."
    assert env.success


def test_bad_config() -> None:
    with pytest.raises(ConfigError, match="hops"):
        FaultyToolsEnv(hops=0)
    with pytest.raises(ConfigError, match="flaky_p"):
        FaultyToolsEnv(flaky_p=1.0)
    with pytest.raises(ConfigError, match="fail_at_step"):
        FaultInjection(FaultyToolsEnv(), fail_at_step=0)
