"""The pilot's measured error rate against known answers (issue 29 item 5's gate input)."""

from __future__ import annotations

from typing import Any

import pytest
from budgetmix.exceptions import ConfigError
from budgetmix.training.diagnostics.episodes import (
    frozenlake_oracle_policy,
    frozenlake_q,
    invalid_reply,
    pointwise,
    run_episodes,
)
from budgetmix.training.envs.frozenlake_compact import MOVE_LETTERS, parse_move
from budgetmix.training.envs.registry import env_tasks
from budgetmix.training.experiment.pilot import PILOT_SEED_BASE, measured_error_rate
from budgetmix.training.experiment.run import EVAL_SEED_BASE, SENSITIVITY_OFFSET

pytest.importorskip("numpy")

DESC = ("SFF", "HFF", "HHG")


def _rate(noise: float, episodes: int = 80) -> dict[str, object]:
    from budgetmix.training.envs.frozenlake_oracle import FrozenLakeModel

    model = FrozenLakeModel(DESC, True, 0.8)
    q = frozenlake_q(model)
    kwargs = {"desc": list(DESC), "success_rate": 0.8}
    tasks = env_tasks("frozenlake-compact", range(episodes), kwargs)
    policy = frozenlake_oracle_policy(model, moves=MOVE_LETTERS, noise=noise, seed=3)
    traces = [tr for b in (4, 7, 14) for tr in run_episodes(tasks, policy, b, q=q)]
    return measured_error_rate(traces, q, MOVE_LETTERS, parse_move)


def test_the_optimum_never_errs_and_a_noisy_one_errs_at_its_rate() -> None:
    exact = _rate(0.0)
    assert exact["rate"] == 0.0 and exact["errors"] == 0 and exact["points"] > 100
    noisy = _rate(0.3)
    assert noisy["lo"] <= 0.3 <= noisy["hi"]  # a random other move with probability 0.3
    assert 0.22 < noisy["rate"] < 0.38


def test_an_unreadable_reply_is_an_error() -> None:
    from budgetmix.training.envs.frozenlake_oracle import FrozenLakeModel

    model = FrozenLakeModel(DESC, True, 0.8)
    q = frozenlake_q(model)
    tasks = env_tasks("frozenlake-compact", range(8), {"desc": list(DESC), "success_rate": 0.8})
    traces = run_episodes(tasks, pointwise(invalid_reply()), 7, q=q)
    assert measured_error_rate(traces, q, MOVE_LETTERS, parse_move)["rate"] == 1.0
    with pytest.raises(ConfigError, match="single optimal move"):
        measured_error_rate([], q, MOVE_LETTERS, parse_move)


def test_pilot_episodes_lie_above_every_confirmatory_range() -> None:
    assert PILOT_SEED_BASE > EVAL_SEED_BASE + SENSITIVITY_OFFSET + 1_000_000


def test_a_pilot_measured_along_the_way_trains_the_same_base() -> None:
    """Measuring at checkpoints leaves the SFT run as it was: the same final weights."""
    import hashlib
    import json
    from pathlib import Path
    from tempfile import TemporaryDirectory

    from budgetmix.training.experiment.config import experiment_preset
    from budgetmix.training.experiment.pilot import measure_base, sft_pilot

    pytest.importorskip("torch")
    cfg = experiment_preset(
        "confirm", seed=100, threads=1, sft_steps=3, sft_batch=2, hidden_size=16,
        env_kwargs={"hops": 2, "fault_p": 0.2, "guess_p": 0.3},
    )  # fmt: skip
    with TemporaryDirectory() as tmp:
        along = sft_pilot(cfg, Path(tmp, "a"), episodes=2, progress=False, checkpoints=(1, 2))
        plain = sft_pilot(cfg, Path(tmp, "b"), episodes=2, progress=False)
        digest = [
            hashlib.sha256(Path(r["base"], "model.safetensors").read_bytes()).hexdigest()
            for r in (along, plain)
        ]
        logs = [Path(r["base"]).parent / "metrics.jsonl" for r in (along, plain)]
        losses = [[json.loads(line)["sft_loss"] for line in p.open()] for p in logs]
        again = measure_base(cfg, plain["base"], episodes=2)  # a saved base, measured again
    assert again["error_rate"] == plain["error_rate"]
    assert again["sensitivity"] == plain["sensitivity"]
    assert digest[0] == digest[1] and losses[0] == losses[1] and len(losses[0]) == 3
    assert [c["sft_steps"] for c in along["curve"]] == [1, 2, 3]
    assert along["curve"][-1]["error_rate"] == along["error_rate"] == plain["error_rate"]
    assert "curve" in plain and len(plain["curve"]) == 1
    with pytest.raises(ConfigError, match="checkpoints"):
        sft_pilot(cfg, "unused", checkpoints=(3,))


def test_the_design_command_runs_a_pilot_with_overrides(tmp_path: Any, capsys: Any) -> None:
    """``design --pilot SEED --set K=V``: the pilot on the overridden preset, in pilot.json."""
    import json

    from budgetmix.training.experiment.design import main

    pytest.importorskip("torch")
    sets = ["threads=1", "sft_steps=3", "sft_batch=2", "hidden_size=16",
            'env_kwargs={"hops": 2, "fault_p": 0.2, "guess_p": 0.3}']  # fmt: skip
    argv = [a for s in sets for a in ("--set", s)]
    assert main([*argv, "--out", str(tmp_path), "--pilot", "104", "--checkpoints", "2",
                 "--episodes", "2"]) == 0  # fmt: skip
    result = json.loads((tmp_path / "pilot.json").read_text())
    assert result["config"]["seed"] == 104 and result["config"]["sft_steps"] == 3
    assert result["config"]["env_kwargs"]["hops"] == 2
    assert result["config"]["sft_labels"] == "optimal"  # the confirm preset's recipe
    assert [c["sft_steps"] for c in result["curve"]] == [2, 3]
    assert result["gate"]["error_rate"] == result["error_rate"]["rate"]
    assert "sft steps 3: sensitivity" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="--set: expected FIELD=VALUE"):
        main(["--set", "sft_steps", "--out", str(tmp_path), "--pilot", "104"])
