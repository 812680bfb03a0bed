"""FrozenLakeEnv: parsing, labels, termination, determinism."""

from __future__ import annotations

import sys

import pytest
from budgetmix.environment import EnvStateError
from budgetmix.exceptions import ConfigError, MissingExtraError
from budgetmix.training.envs import FrozenLakeEnv, parse_action


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("left", 0),
        ("DOWN", 1),
        ("I go up, no wait, right", 2),
        ("Action: up\nbecause left is a hole", 3),
        ("**Action:** right, then left", 2),
        ("upward", None),
        ("no idea", None),
    ],
)
def test_parse_action(text: str, expected: int | None) -> None:
    assert parse_action(text) == expected


def test_observation_shows_grid_and_agent() -> None:
    env = FrozenLakeEnv(map_name="4x4", slippery=False)
    obs = env.reset(0)
    lines = obs.splitlines()
    assert lines[:4] == ["A F F F", "F H F H", "F F F H", "H F F G"]
    assert "row 0, column 0" in obs
    assert "slippery" in env.instructions()


def test_invalid_text_is_a_format_mistake_and_the_agent_stays() -> None:
    env = FrozenLakeEnv(map_name="4x4", slippery=False)
    env.reset(0)
    result = env.step("hmm, not sure")
    assert not result.label.valid
    assert result.label.mistake == "model_format_error"
    assert not result.done
    assert env.position == (0, 0)


def test_wall_move_is_env_action_failed() -> None:
    env = FrozenLakeEnv(map_name="4x4", slippery=False)
    env.reset(0)
    result = env.step("up")
    assert result.label.valid
    assert result.label.mistake == "env_action_failed"
    assert env.position == (0, 0)
    assert "edge" in result.observation


def test_hole_ends_episode_without_success() -> None:
    env = FrozenLakeEnv(map_name="4x4", slippery=False)
    env.reset(0)
    env.step("right")
    result = env.step("down")  # (1, 1) is a hole
    assert result.done and not result.success and result.reward == 0.0
    with pytest.raises(EnvStateError):
        env.step("down")


def test_reaching_goal_succeeds_with_progress_labels() -> None:
    env = FrozenLakeEnv(map_name="4x4", slippery=False)
    env.reset(0)
    path = ["down", "down", "right", "down", "right", "right"]
    results = [env.step(a) for a in path]
    assert all(r.label.progress for r in results)
    assert results[-1].done and results[-1].success and results[-1].reward == 1.0
    assert sum(r.reward for r in results) == 1.0


def test_moving_away_is_not_progress() -> None:
    env = FrozenLakeEnv(desc=["SFF", "FFF", "FFG"], slippery=False)
    env.reset(0)
    assert env.step("right").label.progress
    assert not env.step("left").label.progress


def test_slip_rng_is_seeded() -> None:
    def run(seed: int) -> list[tuple[int, int]]:
        env = FrozenLakeEnv(map_name="8x8", slippery=True, success_rate=1 / 3)
        env.reset(seed)
        out = []
        for i in range(30):
            if env.done:
                break
            env.step(["right", "down"][i % 2])
            out.append(env.position)
        return out

    assert run(3) == run(3)
    assert any(run(3) != run(s) for s in range(4, 10))


def test_random_maps_follow_reset_seed_or_map_seed() -> None:
    env = FrozenLakeEnv(map_name="random", size=6, p_frozen=0.8)
    env.reset(1)
    first = env.desc
    env.reset(2)
    assert env.desc != first and len(env.desc) == 6
    env.reset(1)
    assert env.desc == first
    fixed = FrozenLakeEnv(map_name="random", size=5, map_seed=7)
    fixed.reset(1)
    a = fixed.desc
    fixed.reset(2)
    assert fixed.desc == a


def test_success_rate_one_never_slips() -> None:
    env = FrozenLakeEnv(map_name="4x4", slippery=True, success_rate=1.0)
    env.reset(5)
    for action in ["down", "down", "right", "down", "right", "right"]:
        result = env.step(action)
    assert result.success


def test_bad_config() -> None:
    with pytest.raises(ConfigError, match="map_name"):
        FrozenLakeEnv(map_name="3x3")
    with pytest.raises(ConfigError, match="success_rate"):
        FrozenLakeEnv(success_rate=1.5)
    with pytest.raises(ConfigError, match="desc"):
        FrozenLakeEnv(desc=["SF", "FX"])
    with pytest.raises(EnvStateError):
        FrozenLakeEnv().step("left")


def test_missing_gymnasium(monkeypatch: pytest.MonkeyPatch) -> None:
    for mod in [m for m in sys.modules if m == "gymnasium" or m.startswith("gymnasium.")]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setitem(sys.modules, "gymnasium", None)
    with pytest.raises(MissingExtraError, match="envs"):
        FrozenLakeEnv()


@pytest.mark.parametrize("size", [1, 33, 1_000_000, 2.5, True, "5"])
def test_random_map_size_is_bounded(size: object) -> None:
    """A huge side would hang building the map; a clear error instead."""
    with pytest.raises(ConfigError, match="size: must be an integer from 2 to 32"):
        FrozenLakeEnv(map_name="random", size=size, map_seed=0)  # type: ignore[arg-type]
