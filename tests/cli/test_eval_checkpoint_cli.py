"""``budgetmix eval --agent checkpoint``: per-cell sampling streams and ``--batch-size``.

The evaluator builds a fresh agent per episode and passes each (task, sample) cell its own
seed. At temperature 1 the K samples of a task must then draw different ids (each from
its cell's stream: before, every fresh agent restarted the stream of ``--seed``, so the K
samples were one sample K times and pass@k was pass@1), a rerun must draw the same ones,
and ``--batch-size 4`` (the concurrent episodes sampled in shared forward passes) the
same ones again. ``--batch-size`` is checked like the other integer flags.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from budgetmix.cli import main
from budgetmix.evaluation import EpisodeRecord, read_results
from budgetmix.training.data.models import TinyModelSpec, build_tiny_model
from budgetmix.training.rollouts.tokenizer import build_char_tokenizer
from budgetmix.training.serving.serve import TrainedPolicyAgent

from tests.cli.test_cli_errors import assert_flag_error, run_cli

K = 4
_ACT, _START = TrainedPolicyAgent.act, TrainedPolicyAgent.start


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny llama and its char tokenizer, saved as a model directory."""
    path = tmp_path_factory.mktemp("checkpoint")
    tokenizer = build_char_tokenizer()
    spec = TinyModelSpec(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1)
    build_tiny_model(spec, tokenizer, seed=0).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def _eval(
    checkpoint: Path, out: Path, monkeypatch: pytest.MonkeyPatch, *extra: str
) -> tuple[dict[int, tuple[str, ...]], list[EpisodeRecord]]:
    """Run the grid (one task, one budget, K samples at temperature 1); returns every
    episode's actions, keyed by the seed the evaluator passed its agent, and the records
    (without their timings)."""
    actions: dict[int, list[str]] = {}
    act, start = _ACT, _START  # the originals, not an earlier run's wrappers

    def starting(self: TrainedPolicyAgent, env: Any, seed: int) -> None:
        start(self, env, seed)
        self.played = actions[seed] = []  # type: ignore[attr-defined]

    def recording(self: TrainedPolicyAgent, *args: Any) -> Any:
        action = act(self, *args)
        self.played.append(str(action))  # type: ignore[attr-defined]
        return action

    monkeypatch.setattr(TrainedPolicyAgent, "act", recording)
    monkeypatch.setattr(TrainedPolicyAgent, "start", starting)
    argv = ["eval", "--agent", "checkpoint", "--model", str(checkpoint), "--temperature", "1"]
    argv += ["--env", "frozenlake", "--seeds", "0", "--budgets", "3", "-k", str(K)]
    argv += ["--max-new-tokens", "6", "--notice", "v1-compact", "--out", str(out)]
    assert main([*argv, "--no-plots", "--no-progress", *extra]) == 0
    records = read_results(out / "results.jsonl").records
    played = {seed: tuple(turns) for seed, turns in actions.items()}
    timeless = [dataclasses.replace(r, latency_s=0.0) for r in records]
    return played, sorted(timeless, key=lambda r: r.sample)


def test_the_k_samples_of_a_task_differ_and_a_rerun_draws_them_again(
    checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    played, records = _eval(checkpoint, tmp_path / "a", monkeypatch)
    assert len(records) == K and len(played) == K  # one episode per sample, each its seed
    assert all(len(turns) == 3 for turns in played.values())  # 3 turns: nothing to parse
    assert len(set(played.values())) == K  # every sample drew its own actions
    again, records_again = _eval(checkpoint, tmp_path / "b", monkeypatch)
    assert again == played and records_again == records
    batched, records_batched = _eval(checkpoint, tmp_path / "c", monkeypatch, "--batch-size", "4")
    assert batched == played and records_batched == records


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--agent", "checkpoint", "--batch-size", "0"], "must be at least 1"),
        (["--agent", "checkpoint", "--batch-size", "two"], "invalid int value"),
        (["--agent", "oracle", "--batch-size", "2"], "only agent checkpoint"),
    ],
)
def test_batch_size_is_checked_like_the_other_integer_flags(
    argv: list[str], message: str, checkpoint: Path, tmp_path: Path, capsys: Any
) -> None:
    base = ["eval", "--env", "frozenlake", "--budgets", "3", "--out", str(tmp_path / "ev")]
    code, err = run_cli([*base, "--model", str(checkpoint), *argv], capsys)
    assert_flag_error(code, err, "eval", "--batch-size")
    assert message in err


def test_the_help_names_batch_size(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--batch-size" in text and "agent checkpoint" in text
