"""What environment a trained model directory was trained on, and whether it matches another.

The trainer writes :data:`TRAINING_ENV_FILE` (``{"env": name, "env_kwargs": {...}}``)
into every ``final/`` model directory (listed in its manifest like any other
file); :func:`env_differences` tells a diagnostic that evaluates the model on
another map or slip rate what differs, so it can say so. Imports nothing heavy.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["TRAINING_ENV_FILE", "env_differences", "read_training_env", "write_training_env"]

#: The file in a model directory that names the environment it was trained on.
TRAINING_ENV_FILE = "training_env.json"


def write_training_env(model_dir: str | Path, env: str, env_kwargs: Mapping[str, Any]) -> Path:
    """Write :data:`TRAINING_ENV_FILE` into ``model_dir``; returns its path."""
    path = Path(model_dir) / TRAINING_ENV_FILE
    data = {"env": env, "env_kwargs": dict(env_kwargs)}
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return path


def read_training_env(model_dir: str | Path) -> dict[str, Any] | None:
    """The ``env``/``env_kwargs`` ``model_dir`` names; ``None`` when absent or unreadable."""
    path = Path(model_dir) / TRAINING_ENV_FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not (
        isinstance(data, dict)
        and isinstance(data.get("env"), str)
        and isinstance(data.get("env_kwargs", {}), dict)
    ):
        return None
    return {"env": data["env"], "env_kwargs": dict(data.get("env_kwargs", {}))}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, int | float) and isinstance(b, int | float):
        return float(a) == float(b)
    return bool(a == b)


def _shown(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def env_differences(
    trained: Mapping[str, Any], env: str, env_kwargs: Mapping[str, Any]
) -> list[str]:
    """What differs between ``trained`` (:func:`read_training_env`) and ``env``/``env_kwargs``.

    Each item reads ``"<key> <trained value> (here <value>)"``; only the keys of
    ``env_kwargs`` are compared (a key the training did not set is named as
    ``unset``). Empty when they match.
    """
    out = []
    if trained.get("env") != env:
        out.append(f"env {trained.get('env')} (here {env})")
    kwargs = trained.get("env_kwargs", {})
    for key, value in env_kwargs.items():
        if key not in kwargs:
            out.append(f"{key} unset (here {_shown(value)})")
        elif not _same(kwargs[key], value):
            out.append(f"{key} {_shown(kwargs[key])} (here {_shown(value)})")
    return out
