"""What a trained model directory was trained on, and whether it matches another.

The trainer writes :data:`TRAINING_ENV_FILE` (``{"env": name, "env_kwargs": {...},
"notice": {"placement": ..., "format": ...}}``) into every ``final/`` model directory
(listed in its manifest like any other file). :func:`env_differences` tells a
diagnostic that evaluates the model on another map or slip rate what differs, so it
can say so; :func:`read_training_notice` gives the notice placement and format the
model was trained with, which a deployment should use
(:func:`budgetmix.training.serve.deployment_notice`, docs/layout.md). Imports
nothing heavy.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from budgetmix._validate import check_choice
from budgetmix.exceptions import ConfigError
from budgetmix.notice import NOTICE_FORMATS, NOTICE_PLACEMENTS

__all__ = [
    "TRAINING_ENV_FILE",
    "env_differences",
    "read_training_env",
    "read_training_notice",
    "write_training_env",
]

#: The file in a model directory that names the environment it was trained on.
TRAINING_ENV_FILE = "training_env.json"


def write_training_env(
    model_dir: str | Path,
    env: str,
    env_kwargs: Mapping[str, Any],
    *,
    notice_format: str | None = None,
    notice_placement: str = "observation",
) -> Path:
    """Write :data:`TRAINING_ENV_FILE` into ``model_dir``; returns its path. With a
    ``notice_format`` the file also records the notice (placement and format) the
    model was trained with."""
    path = Path(model_dir) / TRAINING_ENV_FILE
    data: dict[str, Any] = {"env": env, "env_kwargs": dict(env_kwargs)}
    if notice_format is not None:
        data["notice"] = {"placement": notice_placement, "format": notice_format}
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


def read_training_notice(model_dir: str | Path) -> dict[str, str] | None:
    """The notice ``{"placement", "format"}`` ``model_dir`` was trained with; ``None`` when
    its :data:`TRAINING_ENV_FILE` is absent or records none (a model not trained here, or
    trained before the file recorded it).

    Raises:
        ConfigError: the file records a notice with an unknown placement or format (the
            message names the file and the field).
    """
    path = Path(model_dir) / TRAINING_ENV_FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    notice = data.get("notice") if isinstance(data, dict) else None
    if notice is None:
        return None
    where = f"{path}: notice"
    if not isinstance(notice, dict):
        raise ConfigError(f"{where} must be an object with placement and format")
    placement = check_choice(f"{where}.placement", notice.get("placement"), NOTICE_PLACEMENTS)
    fmt = check_choice(f"{where}.format", notice.get("format"), sorted(NOTICE_FORMATS))
    return {"placement": placement, "format": fmt}


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
