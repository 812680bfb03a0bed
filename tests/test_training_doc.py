"""Every command and snippet docs/training.md prints runs as printed, in order, in one directory.

The ```bash and ```python blocks of docs/training.md are read top to bottom and run
in one empty working directory holding what the walk-through says is there: the
user's tokenizer ``tokenizer/`` (a byte-level BPE trained locally, Qwen2.5's template;
the walk's first command makes ``base/`` from it) and ``user_env.py`` (a copy of
examples/user_env.py). ``budgetmix`` commands run as ``python -m budgetmix.cli``,
``accelerate launch`` as ``python -m accelerate.commands.launch`` on 2 CPU processes;
``budgetmix train`` gets the flags that shrink a run appended (as the README's test
does), none of which changes where anything is written. A python block that opens
with ``# examples/<file>`` is an excerpt: it must appear in that file verbatim.
Every other python block runs as a script there.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "training.md"

#: Documented flags that shrink a run (the last value wins); a run on recorded
#: episodes keeps its SFT steps (the deployment step reads what they trained), one
#: without SFT stays without.
SMALL = ["--set", "steps=1", "--set", "groups_per_step=2", "--set", "group_size=2"]
SMALL_SFT = ["--set", "sft_steps=4", "--set", "sft_batch=4"]
ACCELERATE = ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
ACCELERATE += ["--main_process_port", "0"]  # a free port: other runs may hold 29500


def doc_blocks(text: str) -> list[tuple[str, str]]:
    """``(language, body)`` of every ```bash / ```python block, in order."""
    return re.findall(r"```(bash|python)\n(.*?)```", text, flags=re.S)


def commands(body: str) -> list[list[str]]:
    """A bash block's commands: continuation lines joined, comments dropped."""
    lines = body.replace("\\\n", " ").splitlines()
    return [words for line in lines if (words := shlex.split(line, comments=True))]


def _small(words: list[str]) -> list[str]:
    keeps_sft = "--sft-data" in words or "sft_steps=0" in words
    return ["--no-progress", *SMALL, *([] if keeps_sft else SMALL_SFT)]


def _argv(words: list[str]) -> list[str]:
    if words[0] == "budgetmix":
        extra = _small(words) if words[1] == "train" else []
        return [sys.executable, "-m", "budgetmix.cli", *words[1:], *extra]
    assert words[:2] == ["accelerate", "launch"], f"say how to run {shlex.join(words)!r}"
    rest = words[2:]
    split = rest.index("-m")
    launch = [*rest[:split], *ACCELERATE]
    target = [*rest[split:], *_small(words)]
    return [sys.executable, "-m", "accelerate.commands.launch", *launch, *target]


def test_the_doc_has_the_walk_through_blocks() -> None:
    blocks = doc_blocks(DOC.read_text())
    kinds = [lang for lang, _ in blocks]
    assert kinds.count("bash") >= 2 and kinds.count("python") >= 3
    everything = [w for lang, body in blocks if lang == "bash" for w in commands(body)]
    assert all(w[0] in ("budgetmix", "accelerate") for w in everything)
    assert any("--sft-data" in w and "user_env:Counter" in w for w in everything)
    # the walk makes its base first (budgetmix init-model), then trains from it
    made = [i for i, w in enumerate(everything) if w[:2] == ["budgetmix", "init-model"]]
    used = [i for i, w in enumerate(everything) if w[1] != "init-model" and "base" in str(w)]
    assert made and used and made[0] < used[0]


@pytest.mark.slow
def test_training_doc_runs_in_order(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    sys.path.insert(0, str(ROOT / "tests" / "training"))
    from _layout_fixtures import build_bpe_tokenizer

    build_bpe_tokenizer("qwen").save_pretrained(tmp_path / "tokenizer")  # the doc makes base/
    shutil.copy(ROOT / "examples" / "user_env.py", tmp_path / "user_env.py")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    ran: list[tuple[str, str]] = []  # (language, stdout) of every run
    for lang, body in doc_blocks(DOC.read_text()):
        first = body.splitlines()[0]
        if lang == "python" and first.startswith("# examples/"):
            source = (ROOT / first.removeprefix("# ").strip()).read_text()
            assert body.split("\n", 1)[1] in source, f"{first}: the excerpt is not in the file"
            continue
        if lang == "python":
            runs = [[sys.executable, "-c", body]]
        else:
            runs = [_argv(words) for words in commands(body)]
        for argv in runs:
            proc = subprocess.run(
                argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400
            )
            shown = body if lang == "python" else shlex.join(argv)
            assert proc.returncode == 0, f"{shown}\n{proc.stderr[-3000:]}"
            ran.append((lang, proc.stdout))
    # the walk's steps left what the next ones read
    assert (tmp_path / "episodes.jsonl").read_text().count("\n") == 3
    assert (tmp_path / "runs" / "counter" / "final" / "manifest.json").is_file()
    assert (tmp_path / "runs" / "counter-ddp" / "final" / "model.safetensors").is_file()
    assert (tmp_path / "runs" / "ddp" / "final" / "model.safetensors").is_file()  # ## Scale
    deployed = [out for lang, out in ran if lang == "python"][-1]  # step 5, the last script
    status, turns = deployed.split()[:2]
    assert status in ("success", "failed", "budget_exhausted") and 1 <= int(turns) <= 8
