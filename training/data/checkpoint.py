"""Checkpoints without pickle: tensors in safetensors, everything else in JSON.

Layout of a checkpoint directory::

    model.safetensors        policy weights (the trainable state dict)
    optimizer.safetensors    optimizer tensors, keyed ``state.<param>.<name>``
    rng.safetensors          torch CPU RNG and extra RNG states (a sampler per process)
    state.json               step, optimizer param groups and scalars, scheduler,
                             Python RNG state, the config, the metrics so far
    manifest.json            size and SHA-256 of each file above (written last)

Loading uses ``safetensors.torch.load_file`` and ``json``; nothing is
unpickled, so a checkpoint from an untrusted source cannot run code. Loading
verifies the manifest first, so a truncated or bit-flipped file is a
:class:`~budgetmix.exceptions.CheckpointError` naming it, never a silently
different model. Saving is atomic (see :mod:`budgetmix.manifest`):
a kill at any point leaves the previous or the new checkpoint, and
:func:`latest_checkpoint` finds it.
"""

from __future__ import annotations

import json
import random
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from budgetmix._validate import check_int
from budgetmix.exceptions import CheckpointError
from budgetmix.manifest import (
    MANIFEST_NAME,
    find_published,
    publish_directory,
    stage_directory,
    verify_manifest,
)
from safetensors import SafetensorError
from safetensors.torch import load_file, load_model, save_file, save_model

__all__ = [
    "CHECKPOINT_FILES",
    "TrainingState",
    "latest_checkpoint",
    "load_checkpoint",
    "save_checkpoint",
]

#: The files of a checkpoint directory besides its manifest.
CHECKPOINT_FILES = ("model.safetensors", "optimizer.safetensors", "rng.safetensors", "state.json")

#: What reading a damaged file can raise, turned into CheckpointError at this boundary.
_READ_ERRORS = (SafetensorError, OSError, ValueError, KeyError, TypeError, IndexError, RuntimeError)


@dataclass(frozen=True, slots=True)
class TrainingState:
    """What a checkpoint restores besides the weights."""

    step: int
    scalars: Mapping[str, Any]
    tensors: Mapping[str, torch.Tensor]


def _optimizer_split(state: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for pid, pstate in state["state"].items():
        for name, value in pstate.items():
            if isinstance(value, torch.Tensor):
                tensors[f"state.{pid}.{name}"] = value.detach().cpu().contiguous()
            else:
                scalars.setdefault(str(pid), {})[name] = value
    return tensors, {"param_groups": state["param_groups"], "scalars": scalars}


def _optimizer_join(tensors: Mapping[str, torch.Tensor], meta: Mapping[str, Any]) -> dict[str, Any]:
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        _, pid, name = key.split(".", 2)
        state.setdefault(int(pid), {})[name] = value
    for pid, values in meta["scalars"].items():
        state.setdefault(int(pid), {}).update(values)
    return {"state": state, "param_groups": meta["param_groups"]}


def _python_rng_to_json(rng: random.Random) -> list[Any]:
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


def _python_rng_from_json(data: list[Any]) -> tuple[Any, ...]:
    return (data[0], tuple(data[1]), data[2])


def save_checkpoint(
    directory: str | Path,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    rng: random.Random,
    rng_tensors: Mapping[str, torch.Tensor],
    step: int,
    scalars: Mapping[str, Any],
) -> Path:
    """Write a checkpoint to ``directory`` atomically; returns ``directory``.

    The files go into ``<directory>.tmp`` with a manifest, are fsynced, and are
    swapped in by renames; what an earlier killed save left is settled first.
    """
    final = Path(directory)
    staged = stage_directory(final)
    # save_model de-duplicates tied weights (embeddings shared with the LM head).
    save_model(model, str(staged / "model.safetensors"))
    opt_tensors, opt_meta = _optimizer_split(optimizer.state_dict())
    save_file(opt_tensors, str(staged / "optimizer.safetensors"))
    tensors = {"torch_cpu": torch.get_rng_state(), **rng_tensors}
    save_file(tensors, str(staged / "rng.safetensors"))
    state = {
        "step": step,
        "optimizer": opt_meta,
        "python_rng": _python_rng_to_json(rng),
        "scalars": dict(scalars),
    }
    (staged / "state.json").write_text(json.dumps(state))
    return publish_directory(staged, final)


def _verify(d: Path) -> None:
    """Verify ``d``'s manifest; without one (an older checkpoint) warn and check presence."""
    if not d.is_dir():
        raise CheckpointError(f"resume: {str(d)!r} is not a checkpoint directory", d)
    if verify_manifest(d, expect=CHECKPOINT_FILES):
        return
    for name in CHECKPOINT_FILES:
        if not (d / name).is_file():
            raise CheckpointError(f"resume: {str(d / name)!r} is missing", d / name)
    warnings.warn(
        f"checkpoint {str(d)!r} has no {MANIFEST_NAME} (saved by an older budgetmix); "
        "loading it without checksum verification",
        UserWarning,
        stacklevel=3,
    )


def _read_state(path: Path) -> dict[str, Any]:
    try:
        state = json.loads(path.read_bytes())
        check_int("step", state["step"])  # a ConfigError is a ValueError: "damaged"
        if not isinstance(state["scalars"], dict):
            raise ValueError("scalars must be an object")
        missing = [key for key in ("optimizer", "python_rng") if key not in state]
        if missing:
            raise ValueError(f"missing {', '.join(missing)}")
    except _READ_ERRORS as exc:
        raise CheckpointError(f"resume: {str(path)!r} is damaged: {exc!r}", path) from exc
    return dict(state)


def load_checkpoint(
    directory: str | Path,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    rng: random.Random,
) -> TrainingState:
    """Restore weights, optimizer and RNGs in place; returns step, scalars and RNG tensors.

    Every file is verified against the manifest before anything is loaded.

    Raises:
        CheckpointError: ``directory`` is not a complete checkpoint, or a file in it is
            damaged (the message and ``path`` name the file).
    """
    d = Path(directory)
    _verify(d)
    state = _read_state(d / "state.json")
    device = str(next(model.parameters()).device)
    current = d / "model.safetensors"
    try:
        load_model(model, str(current), device=device)
        current = d / "optimizer.safetensors"
        opt_tensors = load_file(str(current), device=device)
        optimizer.load_state_dict(_optimizer_join(opt_tensors, state["optimizer"]))
        current = d / "rng.safetensors"
        rngs = load_file(str(current))
        torch.set_rng_state(rngs["torch_cpu"])
        current = d / "state.json"
        rng.setstate(_python_rng_from_json(state["python_rng"]))
    except _READ_ERRORS as exc:
        raise CheckpointError(
            f"resume: {str(current)!r} cannot be loaded: {exc!r}", current
        ) from exc
    return TrainingState(step=state["step"], scalars=state["scalars"], tensors=rngs)


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    """The checkpoint to resume from in ``output_dir``, or ``None`` when there is none.

    Normally ``<output_dir>/checkpoint``; after a kill during a save, whichever
    complete copy that save left (``checkpoint.tmp`` or ``checkpoint.old``).
    """
    return find_published(Path(output_dir) / "checkpoint")
