"""Checkpoints carry a manifest of checksums; damage is a CheckpointError naming the file.

Each damage here used to end in a raw traceback (a truncated file) or, worse,
load silently into a different model (bytes flipped inside tensor data).
"""

from __future__ import annotations

import hashlib
import json
import random
import struct
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from budgetmix.exceptions import CheckpointError, ConfigError
from budgetmix.training.data.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

CHECKPOINT_FILES = ("model.safetensors", "optimizer.safetensors", "rng.safetensors", "state.json")


def _optimizer(model: Any) -> torch.optim.Optimizer:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    optimizer.step()  # the optimizer now has moment tensors to save
    optimizer.zero_grad(set_to_none=True)
    return optimizer


def _save(directory: Path, model: Any, step: int = 3) -> Path:
    return save_checkpoint(
        directory,
        model=model,
        optimizer=_optimizer(model),
        rng=random.Random(0),
        rng_tensors={"sample.rank0": torch.Generator().manual_seed(1).get_state()},
        step=step,
        scalars={"config": {"seed": 0}},
    )


def _load(directory: Path, model: Any) -> Any:
    return load_checkpoint(
        directory, model=model, optimizer=_optimizer(model), rng=random.Random(1)
    )


def flip_tensor_byte(path: Path) -> None:
    """Flip one byte in the middle of a safetensors file's tensor data (header intact)."""
    raw = bytearray(path.read_bytes())
    (header_len,) = struct.unpack("<Q", raw[:8])
    data_start = 8 + header_len
    middle = data_start + (len(raw) - data_start) // 2
    raw[middle] ^= 0x40
    path.write_bytes(bytes(raw))


def truncate_half(path: Path) -> None:
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])


def test_save_writes_a_manifest_of_every_file(tmp_path: Path, tiny_model: Any) -> None:
    ckpt = _save(tmp_path / "checkpoint", tiny_model)
    manifest = json.loads((ckpt / "manifest.json").read_text())
    assert manifest["format"] == "budgetmix-manifest"
    assert manifest["version"] == 1
    assert set(manifest["files"]) == set(CHECKPOINT_FILES)
    for name, entry in manifest["files"].items():
        data = (ckpt / name).read_bytes()
        assert entry == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def test_an_intact_checkpoint_round_trips(tmp_path: Path, tiny_model: Any, tokenizer: Any) -> None:
    from budgetmix.training.data.models import TinyModelSpec, build_tiny_model

    ckpt = _save(tmp_path / "checkpoint", tiny_model)
    other = build_tiny_model(TinyModelSpec(), tokenizer, seed=5)
    state = _load(ckpt, other)
    assert state.step == 3
    loaded = other.state_dict()
    for name, value in tiny_model.state_dict().items():
        assert torch.equal(loaded[name], value), name


@pytest.mark.parametrize(
    ("name", "damage"),
    [
        ("model.safetensors", flip_tensor_byte),
        ("model.safetensors", truncate_half),
        ("optimizer.safetensors", flip_tensor_byte),
        ("rng.safetensors", truncate_half),
        ("state.json", truncate_half),
        ("state.json", Path.unlink),
    ],
)
def test_damage_is_an_error_naming_the_file(
    tmp_path: Path, tiny_model: Any, name: str, damage: Any
) -> None:
    ckpt = _save(tmp_path / "checkpoint", tiny_model)
    damage(ckpt / name)
    with pytest.raises(CheckpointError, match=name) as caught:
        _load(ckpt, tiny_model)
    assert caught.value.path == ckpt / name


def test_flipped_tensor_bytes_would_load_silently_without_the_manifest(
    tmp_path: Path, tiny_model: Any
) -> None:
    """The damage the manifest exists for: safetensors itself accepts it."""
    from safetensors.torch import load_file

    ckpt = _save(tmp_path / "checkpoint", tiny_model)
    before = {k: v.clone() for k, v in load_file(str(ckpt / "model.safetensors")).items()}
    flip_tensor_byte(ckpt / "model.safetensors")
    after = load_file(str(ckpt / "model.safetensors"))  # no error from safetensors
    assert any(not torch.equal(before[k], after[k]) for k in before)
    with pytest.raises(CheckpointError, match=r"model\.safetensors.*(checksum|sha256)"):
        _load(ckpt, tiny_model)


@pytest.mark.parametrize(
    ("name", "damage"),
    [("state.json", truncate_half), ("model.safetensors", truncate_half)],
)
def test_without_a_manifest_damage_is_still_a_clear_error(
    tmp_path: Path, tiny_model: Any, name: str, damage: Any
) -> None:
    ckpt = _save(tmp_path / "checkpoint", tiny_model)
    (ckpt / "manifest.json").unlink()  # a checkpoint from before manifests
    damage(ckpt / name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(CheckpointError, match=name):
            _load(ckpt, tiny_model)


def test_a_checkpoint_without_a_manifest_loads_with_a_warning(
    tmp_path: Path, tiny_model: Any
) -> None:
    ckpt = _save(tmp_path / "checkpoint", tiny_model)
    (ckpt / "manifest.json").unlink()
    with pytest.warns(UserWarning, match="manifest"):
        assert _load(ckpt, tiny_model).step == 3


@pytest.mark.parametrize(
    "manifest",
    [
        "{not json",
        '["a list"]',
        '{"format": "budgetmix-manifest", "version": 99, "files": {}}',
        '{"format": "budgetmix-manifest", "version": 1, "files": {"../outside": '
        '{"size": 1, "sha256": "' + "0" * 64 + '"}}}',
        '{"format": "budgetmix-manifest", "version": 1, "files": {"/etc/hostname": '
        '{"size": 1, "sha256": "' + "0" * 64 + '"}}}',
        '{"format": "budgetmix-manifest", "version": 1, "files": {"state.json": '
        '{"size": -1, "sha256": "xyz"}}}',
    ],
)
def test_a_hostile_or_broken_manifest_is_an_error_naming_it(
    tmp_path: Path, tiny_model: Any, manifest: str
) -> None:
    ckpt = _save(tmp_path / "checkpoint", tiny_model)
    (ckpt / "manifest.json").write_text(manifest)
    with pytest.raises(CheckpointError, match=r"manifest\.json") as caught:
        _load(ckpt, tiny_model)
    assert caught.value.path == ckpt / "manifest.json"


def test_a_manifest_that_omits_a_checkpoint_file_is_refused(
    tmp_path: Path, tiny_model: Any
) -> None:
    ckpt = _save(tmp_path / "checkpoint", tiny_model)
    manifest = json.loads((ckpt / "manifest.json").read_text())
    del manifest["files"]["model.safetensors"]  # swapped weights would go unchecked
    (ckpt / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match=r"model\.safetensors"):
        _load(ckpt, tiny_model)


def test_latest_checkpoint_is_none_for_an_empty_output_dir(tmp_path: Path) -> None:
    assert latest_checkpoint(tmp_path) is None


# -- the trainer: resume and the final model ---------------------------------------------

TINY = {
    "env_kwargs": {"letters": "a", "min_len": 1, "max_len": 3},
    "sft_steps": 1,
    "steps": 1,
    "sft_batch": 4,
    "groups_per_step": 2,
    "group_size": 2,
    "kl_coef": 0.05,
    "save_every": 1,
    "progress": False,
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One finished tiny run (SFT step, RL step with a KL reference); tests copy it."""
    from budgetmix.training.config import preset
    from budgetmix.training.trainer import train

    out = tmp_path_factory.mktemp("run")
    result = train(preset("echo-tiny", output_dir=str(out), **TINY))
    assert result.final_model_dir == out / "final"
    return out


def _copy_run(trained: Path, tmp_path: Path) -> Path:
    import shutil

    out = tmp_path / "run"
    shutil.copytree(trained, out)
    return out


def _resume(out: Path) -> Any:
    from budgetmix.training.config import preset
    from budgetmix.training.trainer import train

    return train(preset("echo-tiny", output_dir=str(out), **TINY), resume=True)


def test_the_final_model_has_a_manifest_that_verifies(trained: Path) -> None:
    from budgetmix.manifest import verify_manifest

    final = trained / "final"
    files = json.loads((final / "manifest.json").read_text())["files"]
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(files)
    assert verify_manifest(final) is True


def test_resume_onto_a_damaged_checkpoint_names_the_file(trained: Path, tmp_path: Path) -> None:
    out = _copy_run(trained, tmp_path)
    flip_tensor_byte(out / "checkpoint" / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"checkpoint/model\.safetensors"):
        _resume(out)


def test_resume_onto_a_damaged_reference_names_the_file(trained: Path, tmp_path: Path) -> None:
    out = _copy_run(trained, tmp_path)
    flip_tensor_byte(out / "reference.safetensors")  # the KL anchor of the RL phase
    with pytest.raises(CheckpointError, match=r"reference\.safetensors"):
        _resume(out)


def test_an_intact_finished_run_resumes_to_the_same_end(trained: Path, tmp_path: Path) -> None:
    out = _copy_run(trained, tmp_path)
    result = _resume(out)
    assert result.steps_done == 2
    assert result.final_model_dir == out / "final"


@pytest.mark.parametrize(
    ("name", "damage"),
    [
        ("model.safetensors", flip_tensor_byte),
        ("model.safetensors", truncate_half),
        ("config.json", truncate_half),
        ("tokenizer.json", truncate_half),
    ],
)
def test_load_pretrained_verifies_the_final_model(
    trained: Path, tmp_path: Path, name: str, damage: Any
) -> None:
    from budgetmix.training.data.models import load_pretrained

    out = _copy_run(trained, tmp_path)
    damage(out / "final" / name)
    with pytest.raises(CheckpointError, match=name) as caught:
        load_pretrained(out / "final")
    assert caught.value.path == out / "final" / name


def test_a_truncated_model_without_a_manifest_is_a_clear_error(
    tmp_path: Path, tiny_model: Any, tokenizer: Any
) -> None:
    from budgetmix.training.data.models import load_pretrained

    tiny_model.save_pretrained(tmp_path)  # a user's own Hugging Face directory
    tokenizer.save_pretrained(tmp_path)
    truncate_half(tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"model\.safetensors|could not load"):
        load_pretrained(tmp_path)


def _forbid_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    import transformers

    def no_hub(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"transformers loading code ran for {args!r}")

    for cls in (transformers.AutoTokenizer, transformers.AutoModelForCausalLM):
        monkeypatch.setattr(cls, "from_pretrained", no_hub)


def test_load_pretrained_of_a_missing_path_names_it_before_transformers_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from budgetmix.training.data.models import load_pretrained

    _forbid_hub(monkeypatch)
    missing = tmp_path / "no-such-model"
    with pytest.raises(ConfigError, match="no-such-model"):
        load_pretrained(missing)


@pytest.mark.parametrize("local_files_only", [True, False])
def test_local_chat_model_of_a_missing_path_names_it_before_transformers_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, local_files_only: bool
) -> None:
    from budgetmix.adapters.local import LocalChatModel

    _forbid_hub(monkeypatch)
    missing = tmp_path / "runs" / "no-such-model"
    with pytest.raises(ConfigError, match="no-such-model"):
        LocalChatModel.from_pretrained(missing, local_files_only=local_files_only)


def test_local_chat_model_verifies_the_final_model(trained: Path, tmp_path: Path) -> None:
    from budgetmix.adapters.local import LocalChatModel

    out = _copy_run(trained, tmp_path)
    assert LocalChatModel.from_pretrained(out / "final").model_name == "final"
    flip_tensor_byte(out / "final" / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"model\.safetensors"):
        LocalChatModel.from_pretrained(out / "final")


# -- hostile values, property-based ------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=12,
)
_entry_names = st.sampled_from(
    ["state.json", "../state.json", "/etc/hostname", "a//b", "./x", "", "C:\\x", "sub/../../x"]
) | st.text(max_size=30)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    data=st.one_of(
        _json,
        st.fixed_dictionaries(
            {
                "format": st.just("budgetmix-manifest"),
                "version": st.sampled_from([1, True, 1.0, "1", 2]),
                "files": st.dictionaries(
                    _entry_names,
                    st.fixed_dictionaries(
                        {"size": _json | st.integers(-5, 10**6), "sha256": _json | st.text()}
                    ),
                    max_size=3,
                ),
            }
        ),
    )
)
def test_any_manifest_is_verified_or_refused_never_a_raw_error(tmp_path: Path, data: Any) -> None:
    from budgetmix.manifest import verify_manifest

    d = tmp_path / "dir"
    d.mkdir(exist_ok=True)
    (d / "state.json").write_text("{}")
    (d / "manifest.json").write_text(json.dumps(data))
    try:
        verify_manifest(d)
    except CheckpointError as exc:
        assert exc.path.is_relative_to(d)  # the error names something inside the directory


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    name=st.sampled_from(CHECKPOINT_FILES),
    where=st.floats(0.0, 1.0),
    xor=st.integers(1, 255),
    cut=st.booleans(),
)
def test_any_damage_to_any_checkpoint_file_is_a_checkpoint_error_naming_it(
    tmp_path: Path, tiny_model: Any, name: str, where: float, xor: int, cut: bool
) -> None:
    ckpt = tmp_path / "checkpoint"
    if not ckpt.exists():
        _save(ckpt, tiny_model)
    pristine = (ckpt / name).read_bytes()
    raw = bytearray(pristine)
    at = min(int(where * len(raw)), len(raw) - 1)
    if cut:
        del raw[at:]
    else:
        raw[at] ^= xor
    (ckpt / name).write_bytes(bytes(raw))
    try:
        with pytest.raises(CheckpointError, match=name) as caught:
            _load(ckpt, tiny_model)
        assert caught.value.path == ckpt / name
    finally:
        (ckpt / name).write_bytes(pristine)
