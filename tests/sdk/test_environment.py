"""The core environment protocols: FaultInjection and unwrap on any environment."""

from __future__ import annotations

from budgetmix.environment import FaultInjection, unwrap
from budgetmix.training.envs import FrozenLakeEnv


def test_fault_injection_on_any_env() -> None:
    inner = FrozenLakeEnv(map_name="4x4", slippery=False)
    env = FaultInjection(inner, fail_at_step=2)
    assert env.name == "frozenlake+faults" and unwrap(env) is inner
    assert env.instructions() == inner.instructions()
    env.reset(0)
    assert env.step("down").label.mistake is None
    failed = env.step("down")
    assert failed.label.mistake == "env_action_failed" and failed.info["injected_fault"]
    assert inner.position == (1, 0)  # the rejected move did not happen
    assert env.step("down").label.mistake is None
    assert inner.position == (2, 0)
    env.reset(0)  # the step count restarts
    assert env.step("down").label.mistake is None
