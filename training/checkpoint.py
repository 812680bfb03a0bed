"""Checkpoints without pickle: tensors in safetensors, everything else in JSON.

Layout of a checkpoint directory::

    model.safetensors        policy weights (the trainable state dict)
    optimizer.safetensors    optimizer tensors, keyed ``state.<param>.<name>``
    rng.safetensors          torch CPU RNG and extra RNG states (a sampler per process)
    state.json               step, optimizer param groups and scalars, scheduler,
                             Python RNG state, the config, the metrics so far

Loading uses ``safetensors.torch.load_file`` and ``json``; nothing is
unpickled, so a checkpoint from an untrusted source cannot run code.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from budgetmix.exceptions import ConfigError
from safetensors.torch import load_file, load_model, save_file, save_model

__all__ = ["TrainingState", "latest_checkpoint", "load_checkpoint", "save_checkpoint"]


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
    """Write a checkpoint to ``directory`` atomically (temp dir, then rename); returns it."""
    final = Path(directory)
    tmp = final.with_name(final.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    # save_model de-duplicates tied weights (embeddings shared with the LM head).
    save_model(model, str(tmp / "model.safetensors"))
    opt_tensors, opt_meta = _optimizer_split(optimizer.state_dict())
    save_file(opt_tensors, str(tmp / "optimizer.safetensors"))
    tensors = {"torch_cpu": torch.get_rng_state(), **rng_tensors}
    save_file(tensors, str(tmp / "rng.safetensors"))
    state = {
        "step": step,
        "optimizer": opt_meta,
        "python_rng": _python_rng_to_json(rng),
        "scalars": dict(scalars),
    }
    (tmp / "state.json").write_text(json.dumps(state))
    if final.exists():
        old = final.with_name(final.name + ".old")
        os.replace(final, old)
        os.replace(tmp, final)
        for f in old.iterdir():
            f.unlink()
        old.rmdir()
    else:
        os.replace(tmp, final)
    return final


def load_checkpoint(
    directory: str | Path,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    rng: random.Random,
) -> TrainingState:
    """Restore weights, optimizer and RNGs in place; returns step, scalars and RNG tensors.

    Raises:
        ConfigError: ``directory`` is not a complete checkpoint.
    """
    d = Path(directory)
    needed = ("model.safetensors", "optimizer.safetensors", "rng.safetensors", "state.json")
    missing = [n for n in needed if not (d / n).is_file()]
    if missing:
        raise ConfigError(f"resume: {str(d)!r} is not a checkpoint (missing {', '.join(missing)})")
    device = next(model.parameters()).device
    load_model(model, str(d / "model.safetensors"), device=str(device))
    state = json.loads((d / "state.json").read_text())
    opt_tensors = load_file(str(d / "optimizer.safetensors"), device=str(device))
    optimizer.load_state_dict(_optimizer_join(opt_tensors, state["optimizer"]))
    rngs = load_file(str(d / "rng.safetensors"))
    torch.set_rng_state(rngs["torch_cpu"])
    rng.setstate(_python_rng_from_json(state["python_rng"]))
    return TrainingState(step=int(state["step"]), scalars=state["scalars"], tensors=rngs)


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    """``<output_dir>/checkpoint`` when it holds a complete checkpoint, else ``None``."""
    d = Path(output_dir) / "checkpoint"
    return d if (d / "state.json").is_file() else None
