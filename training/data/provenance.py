"""What a trained model directory was trained on, and whether it matches another.

The trainer writes :data:`TRAINING_ENV_FILE` (``{"env": name, "env_kwargs": {...},
"notice": {"placement": ..., "format": ...}, "tool_call_format": "hermes",
"grace_turn": false}``) into every ``final/`` model directory (listed in its manifest
like any other file): the parser its replies were read with
(:func:`read_training_parser`) and that it was trained without a grace turn
(:func:`read_training_grace`), which a deployment follows (docs/layout.md).
:func:`env_differences` tells a diagnostic that evaluates the model on another map
or slip rate what differs, so it can say so; :func:`read_training_notice` gives the
notice placement and format the model was trained with, which a deployment should use
(:func:`budgetmix.training.serving.serve.deployment_notice`, docs/layout.md).

A run's **fingerprint** (:func:`run_fingerprint`) says what its numbers came from: package
versions, SHA-256 of the config and of the input files, the pinned thread count and
kernels (:mod:`budgetmix.training.data.reproducibility`) and the SHA-256 of every checkpoint
tensor file (read from the checkpoints' manifests). Its ``digest`` covers all of that but
the machine's thread variables (informational: the run pins its own count), so two runs
with equal digests trained byte-identical checkpoints from the same inputs;
:func:`fingerprint_differences` names what differs from a reference
(:func:`write_reference_fingerprint` records one, e.g. ``docs/demo_fingerprint.json``).
Imports nothing heavy.
"""

from __future__ import annotations

import functools
import hashlib
import json
import platform
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from budgetmix._validate import check_choice
from budgetmix.exceptions import CheckpointError, ConfigError
from budgetmix.manifest import MANIFEST_NAME, file_sha256, read_manifest
from budgetmix.notice import NOTICE_FORMATS, NOTICE_PLACEMENTS
from budgetmix.training.data.kernel_probe import probe_differences

__all__ = [
    "FINGERPRINT_FILE",
    "FINGERPRINT_PACKAGES",
    "TRAINING_ENV_FILE",
    "checkpoint_hashes",
    "config_sha256",
    "env_differences",
    "fingerprint_differences",
    "package_versions",
    "read_fingerprint",
    "read_training_env",
    "read_training_grace",
    "read_training_notice",
    "read_training_parser",
    "run_fingerprint",
    "write_fingerprint",
    "write_reference_fingerprint",
    "write_run_fingerprint",
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
    tool_call_format: str | None = None,
) -> Path:
    """Write :data:`TRAINING_ENV_FILE` into ``model_dir``; returns its path. With a
    ``notice_format`` the file also records the notice (placement and format) the
    model was trained with and ``"grace_turn": false`` (training rollouts have none);
    with a ``tool_call_format`` the parser its tool calls were read with."""
    path = Path(model_dir) / TRAINING_ENV_FILE
    data: dict[str, Any] = {"env": env, "env_kwargs": dict(env_kwargs)}
    if notice_format is not None:
        data["notice"] = {"placement": notice_placement, "format": notice_format}
        data["grace_turn"] = False
    if tool_call_format is not None:
        data["tool_call_format"] = tool_call_format
    from budgetmix.telemetry.redaction import redact_data  # no credential in a checkpoint

    path.write_text(json.dumps(redact_data(data), indent=2, sort_keys=True) + "\n")
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


def _recorded(model_dir: str | Path, key: str) -> tuple[Path, Any]:
    """``(file, value of key)`` of ``model_dir``'s :data:`TRAINING_ENV_FILE` (``None``
    when the file or the key is absent or unreadable)."""
    path = Path(model_dir) / TRAINING_ENV_FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return path, None
    return path, data.get(key) if isinstance(data, dict) else None


def read_training_parser(model_dir: str | Path) -> str | None:
    """The tool-call parser (``"hermes"`` or ``"llama_json"``) ``model_dir`` was trained
    with; ``None`` when its file records none.

    Raises:
        ConfigError: the file records an unknown parser (the message names it).
    """
    from budgetmix.adapters.chat_template import TOOL_CALL_FORMATS

    path, value = _recorded(model_dir, "tool_call_format")
    if value is None:
        return None
    return check_choice(f"{path}: tool_call_format", value, TOOL_CALL_FORMATS)


def read_training_grace(model_dir: str | Path) -> bool | None:
    """Whether ``model_dir`` was trained with a grace turn (``False`` for every model the
    trainer wrote); ``None`` when its file records nothing.

    Raises:
        ConfigError: the value is not a boolean.
    """
    path, value = _recorded(model_dir, "grace_turn")
    if value is not None and not isinstance(value, bool):
        raise ConfigError(f"{path}: grace_turn must be true or false, got {value!r}")
    return value


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


#: The file a training run writes its fingerprint to, in its ``output_dir``.
FINGERPRINT_FILE = "fingerprint.json"
#: Packages whose versions a fingerprint records (a missing one is ``None``).
FINGERPRINT_PACKAGES = (
    "budgetmix",
    "torch",
    "transformers",
    "accelerate",
    "safetensors",
    "tokenizers",
    "peft",
    "numpy",
)
#: Config keys that say where a run writes or whether it is watched, not what it computes.
_NOT_COMPUTED = ("output_dir", "progress")
#: The fingerprint's parts its digest covers (``threads.environment`` is left out).
_DIGESTED = ("packages", "config_sha256", "data_sha256", "kernels", "checkpoints")


def _canonical(data: Any) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), default=str).encode()


def package_versions() -> dict[str, str | None]:
    """Python's version and each of :data:`FINGERPRINT_PACKAGES`' installed version."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in FINGERPRINT_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def config_sha256(config: Mapping[str, Any]) -> str:
    """SHA-256 of a config's canonical JSON, without where it writes (``output_dir``)
    and whether it is watched (``progress``)."""
    return hashlib.sha256(
        _canonical({k: v for k, v in config.items() if k not in _NOT_COMPUTED})
    ).hexdigest()


def _data_sha256(files: Iterable[str | Path]) -> str:
    """SHA-256 over the input files (a directory: every file in it), by name and content."""
    entries = []
    for item in files:
        path = Path(item)
        inside = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        entries += [
            [p.name if p == path else str(p.relative_to(path)), file_sha256(p)] for p in inside
        ]
    return hashlib.sha256(_canonical(entries)).hexdigest()


def checkpoint_hashes(root: str | Path) -> dict[str, str]:
    """``{"<dir>/<file>.safetensors": sha256}`` for every tensor file under ``root``,
    relative to it: from the manifest of a checkpoint or model directory (``root`` itself
    included), hashed here for a file outside one (the KL reference).

    Raises:
        CheckpointError: a manifest that cannot be read (the message names it).
    """
    base = Path(root)
    out: dict[str, str] = {}
    for manifest in sorted(base.rglob(MANIFEST_NAME)):
        directory = manifest.parent
        for name, entry in sorted(read_manifest(directory).items()):
            if name.endswith(".safetensors"):
                out[(directory / name).relative_to(base).as_posix()] = str(entry["sha256"])
    for path in sorted(base.rglob("*.safetensors")):
        out.setdefault(path.relative_to(base).as_posix(), file_sha256(path))
    return dict(sorted(out.items()))


def run_fingerprint(
    config: Mapping[str, Any],
    root: str | Path,
    *,
    threads: int,
    data: Iterable[str | Path] = (),
) -> dict[str, Any]:
    """The fingerprint of a run of ``config`` that wrote its checkpoints under ``root``
    with ``threads`` pinned intra-op threads, from the input files ``data``.

    Raises:
        CheckpointError: a checkpoint manifest under ``root`` cannot be read.
    """
    from budgetmix.training.data.reproducibility import (
        cpu_identity,
        kernel_settings,
        thread_settings,
    )

    environment = {k: v for k, v in thread_settings().items() if k != "intra_op"}
    fingerprint: dict[str, Any] = {
        "packages": package_versions(),
        "config_sha256": config_sha256(config),
        "data_sha256": _data_sha256(data),
        "threads": {"intra_op": threads, "environment": environment},
        "kernels": kernel_settings(),
        "machine": cpu_identity(),  # informational, not in the digest
        "kernel_probe": dict(_probe(threads)),  # the same: what this machine's kernels give
        "checkpoints": checkpoint_hashes(root),
    }
    fingerprint["digest"] = _digest(fingerprint)
    return fingerprint


def write_run_fingerprint(
    root: str | Path,
    config: Mapping[str, Any],
    *,
    threads: int,
    data: Iterable[str | Path | None] = (),
) -> Path:
    """Write :func:`run_fingerprint` of the run in ``root`` to ``root/``:data:`FINGERPRINT_FILE`
    (``None`` items of ``data`` are skipped); returns its path.

    Raises:
        CheckpointError: a checkpoint manifest under ``root`` cannot be read.
    """
    inputs = [d for d in data if d is not None]
    found = run_fingerprint(config, root, threads=threads, data=inputs)
    return write_fingerprint(Path(root) / FINGERPRINT_FILE, found)


def record_run_fingerprint(
    summary: str | Path,
    config: Mapping[str, Any],
    root: str | Path,
    *,
    threads: int,
    data: Iterable[str | Path | None] = (),
) -> dict[str, Any]:
    """Add :func:`run_fingerprint` of the run in ``root`` to its ``summary`` JSON file under
    ``"fingerprint"`` (``None`` items of ``data`` are skipped); returns the fingerprint.

    Raises:
        CheckpointError: ``summary`` is not a JSON object, or a checkpoint manifest under
            ``root`` cannot be read (the message names the file).
    """
    path = Path(summary)
    try:
        content = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{str(path)!r} is not a readable summary: {exc}", path) from exc
    if not isinstance(content, dict):
        raise CheckpointError(f"{str(path)!r} is not a JSON object", path)
    inputs = [d for d in data if d is not None]
    content["fingerprint"] = run_fingerprint(config, root, threads=threads, data=inputs)
    path.write_text(json.dumps(content, indent=2, sort_keys=True) + "\n")
    return dict(content["fingerprint"])


@functools.cache
def _probe(threads: int) -> dict[str, str]:
    """The kernel probe under the pins and ``threads`` threads, as training ran them; once
    per process and thread count (the first kernel of a process fixes the pins)."""
    from budgetmix.training.data.kernel_probe import kernel_probe
    from budgetmix.training.data.reproducibility import reproducible

    with reproducible(threads):
        return kernel_probe()


def _digest(fingerprint: Mapping[str, Any]) -> str:
    covered = {k: fingerprint.get(k) for k in _DIGESTED}
    covered["threads"] = dict(fingerprint.get("threads") or {}).get("intra_op")
    return hashlib.sha256(_canonical(covered)).hexdigest()


def fingerprint_differences(
    fingerprint: Mapping[str, Any], reference: Mapping[str, Any]
) -> list[str]:
    """What differs between two fingerprints, one item per part (``"packages: torch
    2.13.0+cpu (reference 2.12.0)"``, ``"checkpoints: 3 of 13 files"``); empty when
    their digests are equal."""
    if _digest(fingerprint) == _digest(reference):
        return []
    out = []
    for key in ("packages", "kernels"):
        mine, theirs = dict(fingerprint.get(key) or {}), dict(reference.get(key) or {})
        changed = sorted(k for k in {*mine, *theirs} if mine.get(k) != theirs.get(k))
        if changed:
            shown = ", ".join(f"{k} {mine.get(k)} (reference {theirs.get(k)})" for k in changed)
            out.append(f"{key}: {shown}")
    for key in ("config_sha256", "data_sha256"):
        if fingerprint.get(key) != reference.get(key):
            out.append(key.removesuffix("_sha256"))
    mine_m, ref_m = fingerprint.get("machine"), reference.get("machine")
    if mine_m != ref_m:
        out.append(f"machine: {_machine(mine_m)} (reference {_machine(ref_m)})")
    probe = probe_differences(fingerprint.get("kernel_probe"), reference.get("kernel_probe"))
    if probe is not None:
        out.append(probe)
    mine_t = dict(fingerprint.get("threads") or {}).get("intra_op")
    ref_t = dict(reference.get("threads") or {}).get("intra_op")
    if mine_t != ref_t:
        out.append(f"threads: {mine_t} (reference {ref_t})")
    mine_c = dict(fingerprint.get("checkpoints") or {})
    ref_c = dict(reference.get("checkpoints") or {})
    names = {*mine_c, *ref_c}
    changed_c = sum(mine_c.get(n) != ref_c.get(n) for n in names)
    if changed_c:
        out.append(f"checkpoints: {changed_c} of {len(names)} files")
    return out


def _machine(machine: Any) -> str:
    """A CPU identity in a few words (``"not recorded"`` for none)."""
    if not isinstance(machine, Mapping):
        return "not recorded"
    isa = machine.get("isa") or []
    top = "AVX-512" if "avx512f" in isa else ("AVX2" if "avx2" in isa else "no AVX2")
    return f"{machine.get('vendor')} {machine.get('model')} ({machine.get('arch')}, {top})"


def write_fingerprint(path: str | Path, fingerprint: Mapping[str, Any]) -> Path:
    """Write ``fingerprint`` as JSON to ``path``; returns it."""
    target = Path(path)
    target.write_text(json.dumps(dict(fingerprint), indent=2, sort_keys=True) + "\n")
    return target


def read_fingerprint(path: str | Path) -> dict[str, Any] | None:
    """The fingerprint in ``path``: a fingerprint file, or a ``summary.json`` holding one
    under ``"fingerprint"``; ``None`` when absent or unreadable."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    if isinstance(data, dict) and isinstance(data.get("fingerprint"), dict):
        data = data["fingerprint"]
    return data if isinstance(data, dict) and isinstance(data.get("digest"), str) else None


def write_reference_fingerprint(summary: str | Path, reference: str | Path) -> Path:
    """Record the fingerprint of the run whose ``summary.json`` (or fingerprint file) is
    ``summary`` as the reference ``reference`` (e.g. ``docs/demo_fingerprint.json``).

    Raises:
        CheckpointError: ``summary`` holds no fingerprint (the message names it).
    """
    found = read_fingerprint(summary)
    if found is None:
        raise CheckpointError(f"{str(summary)!r} holds no run fingerprint", Path(summary))
    return write_fingerprint(reference, found)
