"""The CPU-checkable parts of bench/gpu/ (flags, model and tokenizer, the in-process path, results).

The vLLM and TRL-colocate paths need a CUDA device and vLLM: ``bash bench/gpu/run.sh``
on a GPU machine runs them (bench/gpu/README.md); here they are skipped with that reason.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

GPU = Path(__file__).resolve().parents[2] / "bench" / "gpu"
sys.path.insert(0, str(GPU))  # bench.py imports gpu_model and gpu_phases from its folder
_spec = importlib.util.spec_from_file_location("gpu_bench", GPU / "bench.py")
assert _spec is not None and _spec.loader is not None
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``bench.py --prepare-only --sft-steps 0``, as a user runs it (a subprocess)."""
    out = tmp_path_factory.mktemp("bench")
    cmd = [sys.executable, str(GPU / "bench.py"), "--out", str(out), "--prepare-only"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([*cmd, "--sft-steps", "0"], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    path = Path(json.loads(proc.stdout.strip().splitlines()[-1])["model_dir"])
    assert path == out / "model"
    return path


@pytest.mark.slow
def test_the_model_is_a_qwen2_that_transformers_loads(model_dir: Path) -> None:
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(model_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    assert config.model_type == "qwen2" and config.architectures == ["Qwen2ForCausalLM"]
    assert config.hidden_size // config.num_attention_heads == 64  # a head size vLLM kernels take
    assert config.vocab_size == len(tok) and tok.chat_template
    generation = json.loads((model_dir / "generation_config.json").read_text())
    assert generation["eos_token_id"] == tok.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])


@pytest.mark.slow
def test_the_in_process_path_runs_on_cpu(model_dir: Path) -> None:
    import gpu_phases

    args = argparse.Namespace(
        model_dir=model_dir, groups=2, group_size=2, max_new_tokens=4, ceiling=4, device="cpu"
    )
    row = gpu_phases.run_phase("inprocess", args)
    assert row["episodes"] == 4 and row["sampled_tokens"] > 0
    assert row["rollout_tokens_per_s"] == pytest.approx(row["sampled_tokens"] / row["seconds"])


def test_results_are_written_as_json_and_a_table(tmp_path: Path) -> None:
    rows: list[dict[str, Any]] = [
        {"path": "inprocess", "ok": True, "rollout_tokens_per_s": 100.0, "sampled_tokens": 50},
        {"path": "vllm", "ok": True, "rollout_tokens_per_s": 450.0, "sampled_tokens": 52},
        {"path": "trl_native", "ok": False, "note": "timed out after 200 s"},
    ]
    meta = {"gpu": "X", "date": "d", "settings": {"groups": 16}, "versions": {"vllm": "0.31.0"}}
    bench.write_results(tmp_path, rows, meta)
    assert json.loads((tmp_path / "results.json").read_text()) == {"meta": meta, "rows": rows}
    table = (tmp_path / "results.md").read_text()
    assert "| budgetmix + vLLM (vllm.LLM) | 450 | 4.5 | - | 52 |" in table
    assert "timed out after 200 s" in table and "groups=16" in table


def test_flags_are_checked() -> None:
    with pytest.raises(SystemExit):
        bench.build_parser().parse_args(["--out", "x", "--groups", "0"])
    args = bench.build_parser().parse_args(["--out", "x"])
    assert (args.groups, args.group_size, args.sft_steps, args.trl_steps) == (16, 8, 60, 4)


@pytest.mark.slow
def test_without_vllm_the_bench_says_how_to_run_it(
    model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here: the GPU paths run instead")
    status = bench.main(["--out", str(model_dir.parent), "--sft-steps", "0"])
    assert status == 2 and "bash bench/gpu/run.sh" in capsys.readouterr().out


@pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="the vLLM and TRL-colocate paths need CUDA and vLLM: bash bench/gpu/run.sh on a GPU",
)
def test_gpu_paths(tmp_path: Path) -> None:  # pragma: no cover - GPU machines only
    status = bench.main(["--out", str(tmp_path), "--groups", "2", "--group-size", "2"])
    assert status == 0, (tmp_path / "results.md").read_text()
