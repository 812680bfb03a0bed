"""Ctrl-C and SIGTERM end a long command with one line: what was saved, the command that resumes.

Each test starts the real ``budgetmix`` command as a subprocess, waits until it has
saved something (a checkpoint, results lines), sends the signal and reads what the
user sees: exit status 130 (SIGINT) or 143 (SIGTERM), no traceback, one stderr line.
The printed command is then run as printed and says where it resumed from.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
ENV["PYTHONWARNINGS"] = "ignore"  # a library's warning is not the command's account


def _default_sigint() -> None:
    # As a terminal starts a command. A suite launched in the background (`cmd &` in a
    # script) has SIGINT ignored, which its children inherit: Python then installs no
    # KeyboardInterrupt handler, and the command rightly goes on.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(words: list[str], cwd: Path) -> subprocess.Popen[str]:
    assert words[0] == "budgetmix"
    argv = [sys.executable, "-m", "budgetmix.cli", *words[1:]]
    return subprocess.Popen(
        argv,
        cwd=cwd,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_sigint,
    )


def _wait_for(ready: Callable[[], bool], proc: subprocess.Popen[str]) -> None:
    """Until ``ready()`` or the command ends. No deadline of its own: a slow machine only
    waits longer (pytest-timeout fails a command that never saves; it is killed then)."""
    try:
        while not ready():
            if proc.poll() is not None:
                _, err = proc.communicate()
                pytest.fail(f"ended before the signal ({proc.returncode}):\n{err[-3000:]}")
            time.sleep(0.2)
    except BaseException:
        proc.kill()
        raise


def _interrupt(proc: subprocess.Popen[str], signum: int) -> tuple[int, str, str]:
    proc.send_signal(signum)
    out, err = proc.communicate()  # a command that does not end: pytest-timeout
    return proc.returncode, out, err


def _account(err: str, prog: str, signame: str) -> str:
    """The one stderr line of an interrupted command; fails on a traceback or more lines."""
    assert "Traceback" not in err, err[-3000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1, err[-3000:]
    assert lines[0].startswith(f"{prog}: interrupted ({signame}); "), lines[0]
    return lines[0]


def _resume_words(line: str) -> list[str]:
    return shlex.split(line.split("resume with: ", 1)[1])


def _checkpoint_ready(out: Path) -> Callable[[], bool]:
    return lambda: (out / "checkpoint" / "state.json").is_file()


def test_train_interrupted_names_its_checkpoint_and_resumes_from_it(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    words = ["budgetmix", "train", "--preset", "echo-tiny", "--output-dir", "run"]
    words += ["--set", "steps=100000", "--set", "save_every=1"]  # long; a checkpoint per step
    proc = _start(words, tmp_path)
    _wait_for(_checkpoint_ready(tmp_path / "run"), proc)
    code, _, err = _interrupt(proc, signal.SIGINT)
    line = _account(err, "budgetmix train", "SIGINT")
    assert code == 130
    assert " saved in 'run'; resume with: " in line
    step = int(line.split("checkpoint at step ", 1)[1].split()[0])
    assert step >= 1
    again = _resume_words(line)
    assert again == [*words, "--resume"]

    resumed = _start(again, tmp_path)
    first: list[str] = []

    def said_where() -> bool:
        assert resumed.stderr is not None
        first.append(resumed.stderr.readline())
        return True

    _wait_for(said_where, resumed)
    assert first[0].strip() == f"resuming from step {step} in 'run'"
    code, _, err = _interrupt(resumed, signal.SIGTERM)
    assert code == 143
    _account(err, "budgetmix train", "SIGTERM")


def test_eval_interrupted_counts_what_it_saved_and_the_rerun_resumes(tmp_path: Path) -> None:
    words = ["budgetmix", "eval", "--env", "frozenlake", "--agent", "oracle", "--tasks", "3000"]
    words += ["--budgets", "6,8", "-k", "4", "--concurrency", "1", "--out", "ev"]
    words += ["--no-plots", "--n-boot", "10"]
    results = tmp_path / "ev" / "results.jsonl"

    def some_episodes() -> bool:
        return results.is_file() and results.read_text().count('"episode"') >= 5

    proc = _start(words, tmp_path)
    _wait_for(some_episodes, proc)
    code, _, err = _interrupt(proc, signal.SIGINT)
    line = _account(err, "budgetmix eval", "SIGINT")
    assert code == 130
    saved = int(line.split("; ", 1)[1].split()[0])
    assert saved >= 5
    assert f"{saved} episodes saved in 'ev/results.jsonl'; resume with: " in line
    again = _resume_words(line)
    assert again == words

    resumed = _start(again, tmp_path)
    seen: list[str] = []

    def said_where() -> bool:
        assert resumed.stdout is not None
        seen.append(resumed.stdout.readline())
        return "resuming:" in seen[-1] or len(seen) > 50

    _wait_for(said_where, resumed)
    code, _, err = _interrupt(resumed, signal.SIGTERM)
    assert code == 143
    _account(err, "budgetmix eval", "SIGTERM")
    assert f"resuming: {saved} episodes already in the results file" in seen[-1]
