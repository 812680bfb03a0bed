"""A kill at any point of a checkpoint save leaves a checkpoint that ``--resume`` finishes from.

Two levels: in process, a simulated crash before and after every filesystem
step of a save (files never fsynced are torn, as a power cut would leave them);
and for real, ``budgetmix train`` SIGKILLed during a save and then resumed.
Both are deterministic: the crash point is a count of calls, never a time.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from budgetmix.exceptions import CheckpointError
from budgetmix.training.data.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint


class Crash(BaseException):
    """Stands for the process dying; a BaseException so no ``except Exception`` eats it."""


class CrashingFilesystem:
    """Counts filesystem steps; at step ``crash_at`` dies (before or after the call).

    On death every file under ``root`` that was never fsynced is cut to half its
    size, which is what a torn write would leave after a power cut.
    """

    NAMES = ("replace", "rename", "fsync", "unlink", "rmdir", "mkdir")

    def __init__(self, root: Path, crash_at: int | None, after: bool) -> None:
        self.root, self.crash_at, self.after = root, crash_at, after
        self.calls = 0
        self.synced: set[tuple[int, int]] = set()
        self.real = {name: getattr(os, name) for name in self.NAMES}
        self.real_rmtree = shutil.rmtree

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for name in self.NAMES:
            monkeypatch.setattr(os, name, self._wrap(name, self.real[name]))
        monkeypatch.setattr(shutil, "rmtree", self._wrap("rmtree", self.real_rmtree))

    def _wrap(self, name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def step(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            dies = self.calls == self.crash_at
            if dies and not self.after:
                self._die()
            if name == "fsync":
                info = os.fstat(args[0])
                self.synced.add((info.st_dev, info.st_ino))
            try:
                return real(*args, **kwargs)
            finally:  # also after a call that raised (mkdir of a directory that exists)
                if dies:
                    self._die()

        return step

    def _die(self) -> None:
        for path in self.root.rglob("*"):
            info = path.lstat()
            if stat.S_ISREG(info.st_mode) and (info.st_dev, info.st_ino) not in self.synced:
                with path.open("r+b") as fh:
                    fh.truncate(info.st_size // 2)
        raise Crash


def _save(directory: Path, model: Any, step: int) -> None:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    save_checkpoint(
        directory,
        model=model,
        optimizer=optimizer,
        rng=random.Random(step),
        rng_tensors={},
        step=step,
        scalars={"config": {}},
    )


def _weights_at(model: Any, step: int) -> dict[str, torch.Tensor]:
    """Give ``model`` weights that identify ``step``; returns a copy of them."""
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float(step))
    return {k: v.clone() for k, v in model.state_dict().items()}


def _crash_points(tmp_path: Path, model: Any, monkeypatch: pytest.MonkeyPatch) -> int:
    """How many filesystem steps one save of a checkpoint over another takes."""
    with monkeypatch.context() as m:
        fs = CrashingFilesystem(tmp_path, None, after=False)
        fs.install(m)
        _save(tmp_path / "count" / "checkpoint", model, 1)
        fs.calls = 0
        _save(tmp_path / "count" / "checkpoint", model, 2)
        return fs.calls


def _cases(points: int) -> Iterator[tuple[int, bool]]:
    for k in range(1, points + 1):
        yield k, False
        yield k, True


def test_a_crash_at_any_step_of_a_save_leaves_old_or_new_checkpoint(
    tmp_path: Path, tiny_model: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    points = _crash_points(tmp_path, tiny_model, monkeypatch)
    assert points >= 4  # writes, fsyncs and renames are all counted
    for k, after in _cases(points):
        out = tmp_path / f"crash-{k}-{'after' if after else 'before'}"
        with monkeypatch.context() as m:
            fs = CrashingFilesystem(out, None, after)
            fs.install(m)
            weights = {1: _weights_at(tiny_model, 1)}
            _save(out / "checkpoint", tiny_model, 1)
            weights[2] = _weights_at(tiny_model, 2)
            fs.calls, fs.crash_at = 0, k
            with pytest.raises(Crash):
                _save(out / "checkpoint", tiny_model, 2)
        found = latest_checkpoint(out)
        assert found is not None, (k, after, sorted(p.name for p in out.iterdir()))
        _weights_at(tiny_model, 0)
        state = load_checkpoint(
            found,
            model=tiny_model,
            optimizer=torch.optim.AdamW(tiny_model.parameters()),
            rng=random.Random(0),
        )
        assert state.step in (1, 2), (k, after)
        loaded = tiny_model.state_dict()
        for name, value in weights[state.step].items():
            assert torch.equal(loaded[name], value), (k, after, name)
        # the next save works over whatever the crash left, and leaves one clean directory
        _save(out / "checkpoint", tiny_model, 3)
        assert sorted(p.name for p in out.iterdir()) == ["checkpoint"], (k, after)
        found = latest_checkpoint(out)
        assert found == out / "checkpoint"
        assert json.loads((found / "state.json").read_text())["step"] == 3


# -- for real: SIGKILL a training run during a save, then `budgetmix train --resume` -------

KILLER = """
import os, signal, sys

target, when, nth = sys.argv[1], sys.argv[2], int(sys.argv[3])
real_replace = os.replace
seen = 0


def replace(src, dst, *args, **kwargs):
    global seen
    hit = os.path.basename(os.fspath(dst)) == target
    seen += hit
    if hit and seen == nth and when == "before":
        os.kill(os.getpid(), signal.SIGKILL)
    real_replace(src, dst, *args, **kwargs)
    if hit and seen == nth and when == "after":
        os.kill(os.getpid(), signal.SIGKILL)


os.replace = replace
from budgetmix.cli.train import main

sys.exit(main(sys.argv[4:]))
"""

TOTAL_STEPS = 4  # 2 SFT + 2 RL, a checkpoint after each


def _argv(out: Path) -> list[str]:
    settings = {
        "sft_steps": 2,
        "steps": 2,
        "sft_batch": 4,
        "groups_per_step": 2,
        "group_size": 2,
        "save_every": 1,
        "kl_coef": 0.05,
    }
    argv = ["--preset", "echo-tiny", "--output-dir", str(out), "--no-progress"]
    for key, value in settings.items():
        argv += ["--set", f"{key}={json.dumps(value)}"]
    return argv


@pytest.mark.slow
@pytest.mark.parametrize(
    "when",
    [
        "after",  # the new checkpoint is in place, the old one not yet removed
        "before",  # the old checkpoint is moved aside, the new one not yet in place
    ],
)
def test_a_run_killed_during_a_save_resumes_to_a_verified_final_model(
    tmp_path: Path, when: str
) -> None:
    from budgetmix.cli.train import main

    out = tmp_path / "run"
    script = tmp_path / "killer.py"
    script.write_text(KILLER)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    killed = subprocess.run(
        [sys.executable, str(script), "checkpoint", when, "3", *_argv(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert not (out / "final").exists()

    assert main([*_argv(out), "--resume"]) == 0
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(TOTAL_STEPS))  # resumed, not restarted: no step twice
    from budgetmix.manifest import verify_manifest

    assert verify_manifest(out / "final", required=True)
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["checkpoint", "final"]


def test_resume_with_nothing_to_resume_names_the_directory(tmp_path: Path) -> None:
    from budgetmix.training.config import preset
    from budgetmix.training.trainer import train

    out = tmp_path / "empty-run"
    cfg = preset("echo-tiny", output_dir=str(out), sft_steps=1, steps=0, progress=False)
    with pytest.raises(CheckpointError, match="empty-run") as caught:
        train(cfg, resume=True)
    assert "resume" in str(caught.value)
    assert caught.value.path == out
    assert not (out / "final").exists()  # it did not quietly train a fresh run


def test_a_metrics_line_torn_by_the_kill_does_not_stop_the_resume(tmp_path: Path) -> None:
    from budgetmix.training.config import preset
    from budgetmix.training.trainer import train

    cfg = preset(
        "echo-tiny",
        output_dir=str(tmp_path),
        sft_steps=3,
        steps=0,
        sft_batch=4,
        save_every=1,
        progress=False,
    )
    train(cfg, stop_after=2)  # checkpoint after step 2 of 3
    with (tmp_path / "metrics.jsonl").open("a") as fh:
        fh.write('{"step": 2, "phase": "sf')  # the kill landed mid-line
    result = train(cfg, resume=True)
    assert [m["step"] for m in result.metrics] == [0, 1, 2]
    assert result.final_model_dir == tmp_path / "final"
