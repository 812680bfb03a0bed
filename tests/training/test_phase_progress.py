"""Progress that tells the truth (issue 34 item 2): each phase has its own ETA, and a run a
token budget stops shows progress against that budget.

Before, the RL line's clock started with the SFT phase (``rl: step 1/20 (5%), elapsed
9m22s, ~2h57m left`` after a long SFT) and a token-budget run's RL line and bar counted
to ``steps``, which it never reached.
"""

from __future__ import annotations

import io
from typing import Any

import pytest
from budgetmix.progress import INTERVAL_ENV, ProgressLine


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_second_phase_counts_its_own_time_from_begin() -> None:
    clock, out = FakeClock(), io.StringIO()
    rl = ProgressLine("rl", 20, stream=out, clock=clock, interval_s=0.0)
    clock.now += 562.0  # the SFT phase: 9m22s before the first RL step
    rl.begin()
    clock.now += 10.0
    rl.update(1)
    assert out.getvalue().splitlines() == ["rl: step 1/20 (5%), elapsed 10s, ~3m10s left"]


def test_a_token_budget_line_counts_tokens() -> None:
    clock, out = FakeClock(), io.StringIO()
    rl = ProgressLine("rl", 6000, stream=out, clock=clock, interval_s=0.0, unit="tokens")
    clock.now += 30.0
    rl.update(1500)
    clock.now += 90.0
    rl.update(6000)
    assert out.getvalue().splitlines() == [
        "rl: tokens 1500/6000 (25%), elapsed 30s, ~1m30s left",
        "rl: tokens 6000/6000 (100%), elapsed 2m00s, done",
    ]


@pytest.mark.slow
def test_training_lines_per_phase_and_against_the_token_budget(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("transformers")
    from budgetmix.training.config import preset
    from budgetmix.training.trainer import train

    begun: list[tuple[str, int]] = []
    real_begin = ProgressLine.begin

    def begin(self: ProgressLine) -> None:
        begun.append((self.stage, self.done))
        real_begin(self)

    monkeypatch.setattr(ProgressLine, "begin", begin)
    monkeypatch.setenv(INTERVAL_ENV, "0")  # a line at every step
    config = preset("echo-tiny").with_overrides(
        output_dir=str(tmp_path / "run"), sft_steps=2, sft_batch=2, steps=1000,
        token_budget=60, groups_per_step=2, group_size=2, eval_episodes=0,
    )  # fmt: skip
    result = train(config)
    assert result.steps_done < 2 + 1000  # the token budget stopped it
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(("sft:", "rl:"))]
    assert begun == [("rl", 0)]  # the RL clock restarted as its phase began, before a step
    assert lines[0].startswith("sft: step 1/2 (50%)")
    rl = [ln for ln in lines if ln.startswith("rl:")]
    assert rl and all(ln.startswith("rl: tokens ") and "/60 (" in ln for ln in rl)
    assert rl[-1].startswith("rl: tokens 60/60 (100%)") and rl[-1].endswith(", done")
