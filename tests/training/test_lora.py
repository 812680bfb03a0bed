"""LoRA: the user's peft LoraConfig reaches the model; the KL reference is the adapter disabled.

The reference must be the policy after SFT (as without LoRA) without a second
copy of the model: when RL starts the SFT adapter is folded into the base
weights and restarts at zero, and the reference is the policy with its adapter
disabled. Checkpoints carry the folded base and the adapter, so a resumed run
continues exactly.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from budgetmix.exceptions import ConfigError
from budgetmix.training.config import TrainConfig, load_config, preset

peft = pytest.importorskip("peft")

USER_LORA = {
    "r": 4,
    "lora_alpha": 12,
    "target_modules": ["gate_proj", "q_proj"],
    "lora_dropout": 0.0,
}
SMALL = {
    "env_kwargs": {"letters": "a", "min_len": 1, "max_len": 3},
    "sft_steps": 2,
    "sft_error_rate": 0.5,
    "sft_batch": 8,
    "steps": 2,
    "lr": 2e-3,
    "groups_per_step": 2,
    "group_size": 4,
    "kl_coef": 0.1,
    "progress": False,
    "save_every": 1,
}


def _adapted(model: Any) -> set[str]:
    """The kinds of module (``q_proj``, ...) carrying a LoRA adapter."""
    return {name.split(".")[-1] for name, m in model.named_modules() if hasattr(m, "lora_A")}


@pytest.mark.parametrize("form", ["table", "LoraConfig"])
def test_the_users_lora_config_reaches_the_peft_model(form: str, tmp_path: Path) -> None:
    from budgetmix.training.data.models import build_policy

    given = USER_LORA if form == "table" else peft.LoraConfig(**USER_LORA)
    cfg = preset("echo-tiny", output_dir=str(tmp_path), lora=given)
    model, _ = build_policy(cfg)
    used = model.peft_config["default"]
    assert (used.r, used.lora_alpha, set(used.target_modules)) == (4, 12, {"gate_proj", "q_proj"})
    assert _adapted(model) == {"gate_proj", "q_proj"}  # k_proj, v_proj, o_proj untouched
    layer = next(m for n, m in model.named_modules() if n.endswith("q_proj"))
    assert layer.scaling["default"] == pytest.approx(12 / 4)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    # the config stays JSON/TOML data and round-trips
    data = json.loads(json.dumps(cfg.to_dict()))
    assert TrainConfig.from_dict(data) == cfg
    toml = tmp_path / "run.toml"
    toml.write_text(
        'preset = "echo-tiny"\n[lora]\nr = 4\nlora_alpha = 12\n'
        'target_modules = ["q_proj", "gate_proj"]\nlora_dropout = 0.0\n'
    )
    assert load_config(toml).lora == cfg.lora


def test_lora_true_keeps_the_old_default(tmp_path: Path) -> None:
    from budgetmix.training.data.models import build_policy

    model, _ = build_policy(preset("echo-tiny", output_dir=str(tmp_path), lora=True, lora_rank=2))
    used = model.peft_config["default"]
    assert (used.r, used.lora_alpha) == (2, 4)
    assert _adapted(model) == {"q_proj", "k_proj", "v_proj", "o_proj"}


@pytest.mark.parametrize(
    ("lora", "message"),
    [
        ({"r": 4, "rank": 8}, r"TrainConfig\.lora: unknown or reserved LoraConfig field\(s\) rank"),
        ({"peft_type": "LORA"}, r"reserved LoraConfig field\(s\) peft_type"),
        ({"r": 0}, r"TrainConfig\.lora\.r must be an integer >= 1"),
        ({"lora_alpha": -1}, r"TrainConfig\.lora\.lora_alpha must be a positive number"),
        ({"task_type": "SEQ_CLS"}, r"TrainConfig\.lora\.task_type must be CAUSAL_LM"),
        ("yes", r"TrainConfig\.lora must be true/false, a table"),
        ({"use_dora": True}, r"TrainConfig\.lora\.use_dora: with sft_steps and kl_coef > 0"),
        ({"modules_to_save": ["lm_head"]}, r"TrainConfig\.lora\.modules_to_save: with sft_"),
    ],
)
def test_bad_lora_configs_name_the_field(lora: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        preset("echo-tiny", lora=lora, kl_coef=0.1)


def test_no_module_matching_is_a_config_error(tmp_path: Path) -> None:
    from budgetmix.training.data.models import build_policy

    cfg = preset("echo-tiny", output_dir=str(tmp_path), lora={"target_modules": ["nope"]})
    with pytest.raises(ConfigError, match=r"TrainConfig\.lora: cannot apply it"):
        build_policy(cfg)


def _logits(model: Any) -> torch.Tensor:
    ids = torch.tensor([[3, 9, 27, 14, 5, 40]])
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_folding_keeps_the_function_and_restarts_the_adapter(tokenizer: Any) -> None:
    from budgetmix.training.algorithms.lora import apply_lora, fold_adapter, lora_config
    from budgetmix.training.data.models import TinyModelSpec, build_tiny_model

    base = build_tiny_model(TinyModelSpec(), tokenizer, seed=0)
    model = apply_lora(base, lora_config(USER_LORA))
    with torch.no_grad():  # what SFT would have taught the adapter
        for p in model.parameters():
            if p.requires_grad:
                p.add_(0.05 * torch.randn_like(p))
    params = {name: id(p) for name, p in model.named_parameters()}
    adapted = _logits(model)
    with model.disable_adapter():
        assert not torch.allclose(_logits(model), adapted, atol=1e-3)
    fold_adapter(model)
    torch.testing.assert_close(_logits(model), adapted, atol=1e-5, rtol=0)
    with model.disable_adapter():  # the reference is now the folded (post-SFT) model
        torch.testing.assert_close(_logits(model), adapted, atol=1e-5, rtol=0)
    assert {name: id(p) for name, p in model.named_parameters()} == params  # optimizer-safe
    assert all(not p.any() for name, p in model.named_parameters() if "lora_B" in name), (
        "the adapter restarts at zero"
    )


def test_the_reference_is_the_adapter_disabled_policy_not_a_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from budgetmix.training.algorithms.objectives import sft_loss
    from budgetmix.training.rollouts.rollout import run_rollouts
    from budgetmix.training.trainer import Trainer

    cfg = preset("echo-tiny", output_dir=str(tmp_path), lora=USER_LORA, **SMALL)
    trainer = Trainer(cfg)
    trainer.run(stop_after=cfg.sft_steps)  # SFT only
    policy = trainer.policy
    specs = trainer._local(trainer._rl_specs())
    rollouts = run_rollouts(specs, trainer._model_generator(), trainer.codec, trainer.settings)
    after_sft = trainer._frozen_logprobs(rollouts, policy)
    size = sum(p.numel() for p in policy.parameters())

    def no_model_copies(obj: Any, memo: Any = None) -> Any:
        assert not isinstance(obj, torch.nn.Module), "a second model was allocated"
        return original(obj, memo)

    original = copy.deepcopy
    monkeypatch.setattr(copy, "deepcopy", no_model_copies)
    trainer.run(stop_after=cfg.sft_steps + 1)  # the first RL step fixes the reference
    assert trainer.reference.is_base and trainer.reference.model is None
    assert not (tmp_path / "reference.safetensors").exists()
    assert sum(p.numel() for p in policy.parameters()) == size

    def nll(chunk: Any, batch: Any, logp: torch.Tensor, start: int) -> Any:
        return sft_loss(logp, batch.loss_mask.to(logp.device)), {}

    trainer._update(rollouts, nll)  # one more optimizer step on the adapter
    reference = trainer._reference_logprobs(rollouts)
    assert reference is not None
    torch.testing.assert_close(reference, after_sft, atol=1e-5, rtol=0)  # the policy after SFT
    with policy.disable_adapter():
        base = trainer._frozen_logprobs(rollouts, policy)
    torch.testing.assert_close(reference, base, atol=1e-6, rtol=0)
    adapted = trainer._frozen_logprobs(rollouts, policy)
    assert (adapted - reference).abs().max() > 1e-4  # the adapter moved away from it


def _stable(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if not k.startswith("time_")} for r in records]


def test_lora_checkpoints_resume_exactly_and_ship_a_whole_model(tmp_path: Path) -> None:
    from budgetmix.training.data.models import load_pretrained
    from budgetmix.training.trainer import train
    from safetensors import safe_open

    def config(name: str) -> TrainConfig:
        return preset("echo-tiny", output_dir=str(tmp_path / name), lora=USER_LORA, **SMALL)

    whole = train(config("whole"))
    train(config("cut"), stop_after=SMALL["sft_steps"] + 1)  # killed after the first RL step
    ckpt = tmp_path / "cut" / "checkpoint"
    assert (ckpt / "manifest.json").is_file()
    with safe_open(str(ckpt / "model.safetensors"), framework="pt") as f:
        keys = list(f.keys())
    assert any("lora_A" in k for k in keys) and any("base_layer" in k for k in keys)
    resumed = train(config("cut"), resume=True)
    assert _stable(resumed.metrics) == _stable(whole.metrics)
    assert resumed.final_model_dir is not None
    merged, _ = load_pretrained(resumed.final_model_dir)  # a whole model, adapter merged
    assert not any("lora" in k for k in merged.state_dict())
    # the SFT adapter was folded into the base, so an adapter alone would not fit the user's
    assert not (resumed.final_model_dir / "adapter").exists()
