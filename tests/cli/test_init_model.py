"""``budgetmix init-model`` makes a first base model from a local tokenizer (issue 34 item 5).

The model directory it writes loads with :func:`budgetmix.training.data.models.load_pretrained`
(what ``model_path`` reads), has the shape asked for, the same seed gives the same
weights, and bad input is one line naming the flag. docs/training.md's walk starts
from it (tests/test_training_doc.py runs the documented command).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from budgetmix.cli import main

pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))
from _layout_fixtures import build_bpe_tokenizer

SHAPE = ["--arch", "qwen2", "--hidden-size", "32", "--layers", "1", "--heads", "2"]
SHAPE += ["--kv-heads", "1", "--intermediate-size", "64"]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tok") / "tokenizer"
    build_bpe_tokenizer("qwen").save_pretrained(path)
    return path


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in lines[0], lines
    return lines[0]


def test_init_model_writes_a_base_that_model_path_loads(
    tokenizer_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from budgetmix.training.data.models import load_pretrained

    base = tmp_path / "base"
    argv = ["init-model", "--tokenizer", str(tokenizer_dir), "--output-dir", str(base)]
    assert main([*argv, *SHAPE]) == 0
    said = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    model, tokenizer = load_pretrained(base)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert (model.config.hidden_size, model.config.num_hidden_layers) == (32, 1)
    assert said["parameters"] == sum(p.numel() for p in model.parameters())
    assert tokenizer.chat_template and len(tokenizer) == model.config.vocab_size

    again = tmp_path / "again"
    assert main(["init-model", "--tokenizer", str(base), "--output-dir", str(again), *SHAPE]) == 0
    assert (again / "model.safetensors").read_bytes() == (base / "model.safetensors").read_bytes()
    other = tmp_path / "other"
    argv = ["init-model", "--tokenizer", str(base), "--output-dir", str(other), *SHAPE]
    assert main([*argv, "--seed", "1"]) == 0
    assert (other / "model.safetensors").read_bytes() != (base / "model.safetensors").read_bytes()


def test_a_model_already_there_is_refused_naming_overwrite(
    tokenizer_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text("{}")
    assert main(["init-model", "--tokenizer", str(tokenizer_dir), "--output-dir", str(base)]) == 2
    line = _one_line(capsys)
    assert line.startswith("budgetmix init-model: error: --output-dir: ") and "--overwrite" in line
    assert (base / "config.json").read_text() == "{}"


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        (["--hidden-size", "0"], "--hidden-size"),
        (["--layers", "-1"], "--layers"),
        (["--arch", "gpt9"], "--arch"),
    ],
)
def test_a_bad_shape_names_its_flag(
    tokenizer_dir: Path, tmp_path: Path, extra: list[str], flag: str,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    argv = ["init-model", "--tokenizer", str(tokenizer_dir), "--output-dir", str(tmp_path / "b")]
    try:
        code: object = main([*argv, *extra])
    except SystemExit as exc:
        code = exc.code
    assert code == 2
    assert _one_line(capsys).startswith(f"budgetmix init-model: error: {flag}: ")
    assert not (tmp_path / "b").exists()


def test_a_tokenizer_without_a_chat_template_names_the_flag(
    tokenizer_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from transformers import AutoTokenizer

    bare = tmp_path / "bare"
    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)
    tok.chat_template = None
    tok.save_pretrained(bare)
    (bare / "chat_template.jinja").unlink(missing_ok=True)
    argv = ["init-model", "--tokenizer", str(bare), "--output-dir", str(tmp_path / "b")]
    assert main(argv) == 2
    line = _one_line(capsys)
    assert line.startswith("budgetmix init-model: error: --tokenizer: ")
    assert "--chat-template" in line
    assert main(["init-model", "--tokenizer", str(tmp_path / "nope"), "--output-dir", "x"]) == 2
    assert "is not a local tokenizer directory" in _one_line(capsys)
