"""Environments by name: every registered one, module:Class, entry points, in config and CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from budgetmix.cli.eval import parse_eval_args
from budgetmix.cli.train import parse_train_args
from budgetmix.exceptions import ConfigError
from budgetmix.training.config import TrainConfig
from budgetmix.training.envs import ENTRY_POINT_GROUP, ENVIRONMENTS, make_env, resolve_env
from budgetmix.training.envs.tool_env import ToolCallEnvironment

USER_MODULE = '''
from budgetmix.training.envs import ToolEnv, ToolResult, env_tool


class Guess(ToolEnv):
    name = "guess"

    def __init__(self, letters: str = "abc") -> None:
        self.letters = letters

    def instructions(self) -> str:
        return "Guess the letter with the guess tool."

    def start(self, seed: int) -> str:
        self.letter = self.letters[seed % len(self.letters)]
        return f"Guess one of {self.letters}."

    @env_tool
    def guess(self, letter: str) -> ToolResult:
        """Guess the letter."""
        ok = letter == self.letter
        return ToolResult(output="yes" if ok else "no", done=ok, success=ok, progress=ok)


def _guess_demo(env_kwargs, error_rate, seed):
    def act(request):
        call = {"name": "guess", "arguments": {"letter": request.env.letter}}
        return {"role": "assistant", "content": "", "tool_calls": [{"id": "c0", "function": call}]}

    return act


class GuessWithDemo(Guess):
    demonstrator = staticmethod(_guess_demo)


def make_guess(letters: str = "ab") -> Guess:
    return Guess(letters)


class NotAnEnv:
    def reset(self, seed: int) -> str:
        return ""


NUMBER = 3


def make_number() -> int:
    return 3


def broken():
    raise RuntimeError("no")
'''


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "user_envs.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "user_envs", raising=False)
    return tmp_path


def test_every_registered_name_is_accepted() -> None:
    assert set(ENVIRONMENTS) == {
        "echo",
        "fault-chain-compact",
        "faulty-tools-compact",
        "faulty_tools",
        "frozenlake",
        "frozenlake-compact",
        "frozenlake-tools",
        "humaneval",
    }
    for name, spec in ENVIRONMENTS.items():
        sft = 0 if spec.demonstrator is None else 3
        assert TrainConfig(env=name, sft_steps=sft).env == name
        assert resolve_env(name) is spec
    # without a demonstrator, SFT needs recorded episodes
    assert TrainConfig(env="humaneval", sft_data="episodes.jsonl").sft_steps == 20
    with pytest.raises(ConfigError, match="or give sft_data"):
        TrainConfig(env="faulty_tools")


def test_module_class_and_factory(user_module: Path) -> None:
    spec = resolve_env("user_envs:Guess")
    assert spec.name == "user_envs:Guess" and spec.demonstrator is None
    env = make_env("user_envs:Guess", letters="xy")
    assert isinstance(env, ToolCallEnvironment) and env.reset(1) == "Guess one of xy."
    tasks = spec.make_tasks([0, 1], {"letters": "xy"})
    assert [t.task_id for t in tasks] == ["user_envs:Guess-0", "user_envs:Guess-1"]
    factory_env = make_env("user_envs:make_guess")
    assert factory_env.reset(0) == "Guess one of ab."
    config = TrainConfig(env="user_envs:Guess", env_kwargs={"letters": "xy"}, sft_steps=0)
    assert TrainConfig.from_dict(config.to_dict()) == config


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("no_such_module:Env", "module 'no_such_module' not found"),
        ("user_envs:Missing", "module 'user_envs' has no attribute 'Missing'"),
        ("user_envs:NotAnEnv", "is not an environment: it has no instructions, step or call_tool"),
        ("user_envs:NUMBER", "is a int, not an environment class or factory"),
        ("user_envs:", "expected module:attribute"),
        ("chess", "unknown environment 'chess'; known: echo, fault-chain-compact, faulty-tools"),
    ],
)
def test_resolution_errors_name_the_problem(user_module: Path, ref: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        resolve_env(ref)
    with pytest.raises(ConfigError, match=r"TrainConfig\.env: "):
        TrainConfig(env=ref, sft_steps=0)


def test_a_factory_that_builds_no_environment_fails_when_called(user_module: Path) -> None:
    with pytest.raises(ConfigError, match="built a int, which is not an environment"):
        make_env("user_envs:make_number")


def test_entry_points(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, user_module: Path) -> None:
    dist = tmp_path / "user_envs_pkg-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: user-envs-pkg\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\nguess = user_envs:Guess\nbroken = user_envs:nothing_here\n"
    )
    spec = resolve_env("guess")
    assert spec.name == "guess" and make_env("guess").reset(2) == "Guess one of abc."
    with pytest.raises(
        ConfigError, match=r"entry point 'broken' \(user_envs:nothing_here\) failed to load"
    ):
        resolve_env("broken")


def test_cli_flags(user_module: Path) -> None:
    config, _ = parse_train_args(
        ["--env", "user_envs:Guess", "--env-kwargs", '{"letters": "xy"}', "--set", "sft_steps=0"]
    )
    assert (config.env, dict(config.env_kwargs)) == ("user_envs:Guess", {"letters": "xy"})
    cfg = parse_eval_args(["--env", "user_envs:Guess", "--budgets", "2", "--agent", "random"])
    assert cfg["env"] == "user_envs:Guess"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--env", "user_envs:Missing", "--set", "sft_steps=0"], "--env: "),
        (
            ["--env", "user_envs:Guess", "--set", "sft_steps=0", "--env-kwargs", '{"x": 1}'],
            "--env-kwargs: ",
        ),
        (["--env", "user_envs:Guess", "--env-kwargs", "[1]"], "--env-kwargs: "),
        (["--sft-data", "missing.jsonl"], "--sft-data: 'missing.jsonl' does not exist"),
    ],
)
def test_cli_errors_name_the_flag(user_module: Path, argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_train_args(argv)


def test_eval_refuses_an_unknown_module_naming_the_flag(user_module: Path) -> None:
    with pytest.raises(ConfigError, match=r"^--env: 'nope:X': module 'nope' not found$"):
        parse_eval_args(["--env", "nope:X", "--budgets", "2"])


@pytest.mark.slow
def test_accelerate_launch_loads_a_user_environment(tmp_path: Path) -> None:
    pytest.importorskip("accelerate")
    (tmp_path / "user_envs.py").write_text(USER_MODULE)
    out = tmp_path / "run"
    cmd = [
        *(sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu"),
        *("--num_processes", "2", "--num_machines", "1", "--main_process_port", "0"),
        *("--mixed_precision", "no", "--dynamo_backend", "no"),
        *("-m", "budgetmix.cli", "train", "--env", "user_envs:Guess", "--output-dir", str(out)),
        *("--no-progress", "--set", "sft_steps=0", "--set", "steps=1"),
        *("--set", "groups_per_step=2", "--set", "group_size=2", "--set", "max_new_tokens=8"),
        *("--set", "hidden_size=16", "--set", "num_layers=1"),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        cmd, cwd=tmp_path, capture_output=True, text=True, timeout=240, env=env, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["phase"] for r in records] == ["rl"] and records[0]["n"] == 4
    trained_on = json.loads((out / "final" / "training_env.json").read_text())
    assert trained_on["env"] == "user_envs:Guess"


def test_tool_env_demonstrations_roll_out_as_tool_calls(tokenizer: Any) -> None:
    pytest.importorskip("gymnasium")
    from budgetmix.policies.samplers import BudgetDraw
    from budgetmix.training.rollouts.chat import ChatCodec
    from budgetmix.training.rollouts.generation import ScriptedGenerator
    from budgetmix.training.rollouts.rollout import EpisodeSpec, RolloutSettings, run_rollouts

    codec = ChatCodec(tokenizer)
    spec = resolve_env("frozenlake-tools")
    tasks = spec.make_tasks(range(3), {"map_name": "4x4", "slippery": False})
    specs = [EpisodeSpec(task=t, budget=BudgetDraw(turns=10, sampler="fixed")) for t in tasks]
    generator = ScriptedGenerator(spec.make_demo_agent({}, 0.0, 0), codec)
    settings = RolloutSettings(
        notice_format="v1-compact", max_new_tokens=200, max_total_tokens=8000, token_check="strict"
    )
    rollouts = run_rollouts(specs, generator, codec, settings)
    assert all(r.success and r.num_turns == 6 for r in rollouts)
    roles = [m["role"] for m in rollouts[0].messages]
    # the last move's result ends the episode: nothing is rendered after it
    assert roles == ["system", "user", *["assistant", "tool"] * 5, "assistant"]
    assert all(step.label.mistake is None for step in rollouts[0].steps)


def test_a_user_demonstrator_trains_sft_through_tool_calls(
    user_module: Path, tokenizer: Any
) -> None:
    from budgetmix.policies.samplers import BudgetDraw
    from budgetmix.training.rollouts.chat import ChatCodec
    from budgetmix.training.rollouts.generation import ScriptedGenerator
    from budgetmix.training.rollouts.rollout import EpisodeSpec, RolloutSettings, run_rollouts

    assert TrainConfig(env="user_envs:GuessWithDemo", sft_steps=3).sft_steps == 3
    spec = resolve_env("user_envs:GuessWithDemo")
    assert spec.demonstrator is not None
    tasks = spec.make_tasks(range(3), {})
    specs = [EpisodeSpec(task=t, budget=BudgetDraw(turns=2, sampler="fixed")) for t in tasks]
    codec = ChatCodec(tokenizer)
    generator = ScriptedGenerator(spec.make_demo_agent({}, 0.0, 0), codec)
    settings = RolloutSettings(max_new_tokens=200, max_total_tokens=4000, token_check="strict")
    rollouts = run_rollouts(specs, generator, codec, settings)
    assert [r.success for r in rollouts] == [True] * 3 and all(r.num_turns == 1 for r in rollouts)
