"""Integrity of saved directories: a manifest of checksums, and publication that a kill cannot tear.

Every directory budgetmix saves (a training checkpoint, the final model) ends
with a ``manifest.json``::

    {"format": "budgetmix-manifest", "version": 1,
     "files": {"model.safetensors": {"size": 1234, "sha256": "9f86d0..."},
               "adapter/adapter_config.json": {"size": 312, "sha256": "..."}}}

:func:`verify_manifest` re-reads every listed file and raises
:class:`~budgetmix.exceptions.CheckpointError` naming the first one that is
missing, has another size, or another SHA-256. The manifest guards against
damage (a torn write, a truncated copy, flipped bits), not against someone
who can rewrite the manifest too. Files the manifest does not list are not
checked; a directory without a manifest (a Hugging Face model of your own)
is not verified at all.

Publication is atomic: a directory is written beside its destination as
``<name>.tmp``, each file and directory is fsynced and the manifest written
last, then ``<name>`` is renamed to ``<name>.old``, ``<name>.tmp`` to
``<name>``, and ``<name>.old`` removed. A kill at any point leaves the old or
the new directory complete; :func:`find_published` finds it and
:func:`settle` (run before the next save) tidies what a killed save left.
Stdlib only, so any loader can verify without importing torch.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from budgetmix.exceptions import CheckpointError

__all__ = [
    "MANIFEST_NAME",
    "file_sha256",
    "find_published",
    "publish_directory",
    "read_manifest",
    "replace_file",
    "settle",
    "stage_directory",
    "verify_file",
    "verify_manifest",
    "write_manifest",
]

MANIFEST_NAME = "manifest.json"
_FORMAT = "budgetmix-manifest"
_VERSION = 1
_SHA256 = re.compile(r"[0-9a-f]{64}")
_CHUNK = 1 << 20


def file_sha256(path: str | Path) -> str:
    """The hex SHA-256 of the file at ``path``, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _fsync(path: Path) -> None:
    """Flush ``path`` (a file or, on POSIX, a directory) to stable storage."""
    if os.name == "nt" and path.is_dir():
        return  # Windows cannot open a directory to flush it
    # POSIX flushes through any descriptor; Windows needs one open for writing
    fd = os.open(path, os.O_RDWR if os.name == "nt" else os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _hash_and_sync(path: Path) -> dict[str, Any]:
    """Size and SHA-256 of ``path``, after flushing it to disk."""
    _fsync(path)
    return {"size": path.stat().st_size, "sha256": file_sha256(path)}


def _listed_files(directory: Path) -> list[Path]:
    skip = {MANIFEST_NAME, MANIFEST_NAME + ".tmp"}
    return sorted(
        p
        for p in directory.rglob("*")
        if p.is_file() and p.relative_to(directory).as_posix() not in skip
    )


def replace_file(staged: str | Path, destination: str | Path) -> Path:
    """Flush ``staged`` and atomically rename it over ``destination``; returns the latter."""
    staged, destination = Path(staged), Path(destination)
    _fsync(staged)
    os.replace(staged, destination)
    _fsync(destination.parent)
    return destination


def write_manifest(directory: str | Path) -> Path:
    """Flush every file under ``directory`` and record its size and SHA-256 in the manifest.

    The manifest is written last and atomically, so its presence means every
    file it lists was complete on disk. Returns the manifest's path.
    """
    root = Path(directory)
    listed = _listed_files(root)
    files = {p.relative_to(root).as_posix(): _hash_and_sync(p) for p in listed}
    for sub in sorted({p.parent for p in listed}, reverse=True):
        _fsync(sub)
    staged = root / (MANIFEST_NAME + ".tmp")
    staged.write_text(json.dumps({"format": _FORMAT, "version": _VERSION, "files": files}))
    return replace_file(staged, root / MANIFEST_NAME)


def _safe_name(name: object) -> bool:
    if not isinstance(name, str) or not name or "\\" in name or "\x00" in name:
        return False
    pure = PurePosixPath(name)
    return (
        not pure.is_absolute()
        and all(part not in ("", ".", "..") for part in pure.parts)
        and pure.as_posix() == name
        and name != MANIFEST_NAME
    )


def _valid_entry(entry: object) -> bool:
    if not isinstance(entry, Mapping) or set(entry) != {"size", "sha256"}:
        return False
    size, sha = entry["size"], entry["sha256"]
    return (
        isinstance(size, int)
        and not isinstance(size, bool)
        and size >= 0
        and isinstance(sha, str)
        and _SHA256.fullmatch(sha) is not None
    )


def read_manifest(directory: Path) -> dict[str, dict[str, Any]]:
    """The manifest's ``files`` table, validated (no entry may point outside ``directory``).

    Raises:
        CheckpointError: the manifest is unreadable, of another format, or lists a bad entry.
    """
    path = directory / MANIFEST_NAME
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{str(path)!r} is not a readable manifest: {exc}", path) from exc
    if not isinstance(data, dict) or data.get("format") != _FORMAT:
        raise CheckpointError(f"{str(path)!r} is not a budgetmix manifest", path)
    if data.get("version") != _VERSION or isinstance(data.get("version"), bool):
        raise CheckpointError(
            f"{str(path)!r} has manifest version {data.get('version')!r}; "
            f"this budgetmix reads version {_VERSION}",
            path,
        )
    files = data.get("files")
    if not isinstance(files, dict):
        raise CheckpointError(f"{str(path)!r} has no 'files' table", path)
    for name, entry in files.items():
        if not _safe_name(name) or not _valid_entry(entry):
            raise CheckpointError(f"{str(path)!r} has an invalid entry {name!r}", path)
    return files


def verify_file(path: Path, size: int, sha256: str) -> None:
    """Check one file against its recorded size and SHA-256.

    Raises:
        CheckpointError: the file is missing, has another size, or another checksum.
    """
    if not path.is_file():
        raise CheckpointError(f"{str(path)!r} is missing", path)
    actual = path.stat().st_size
    if actual != size:
        raise CheckpointError(
            f"{str(path)!r} is damaged: {actual} bytes where {size} were saved (truncated?)",
            path,
        )
    if file_sha256(path) != sha256:
        raise CheckpointError(
            f"{str(path)!r} is damaged: its sha256 checksum differs from the one saved", path
        )


def verify_manifest(
    directory: str | Path, *, required: bool = False, expect: Iterable[str] = ()
) -> bool:
    """Verify every file ``directory``'s manifest lists; ``False`` when there is no manifest.

    Args:
        directory: a directory written by budgetmix (or any directory).
        required: raise instead of returning ``False`` when the manifest is absent.
        expect: names the manifest must list (the files a loader is about to read).

    Raises:
        CheckpointError: naming the missing or damaged file, or the manifest itself.
    """
    root = Path(directory)
    path = root / MANIFEST_NAME
    if not path.is_file():
        if required:
            raise CheckpointError(f"{str(root)!r} has no {MANIFEST_NAME}", path)
        return False
    files = read_manifest(root)
    for name in expect:
        if name not in files:
            raise CheckpointError(
                f"{str(root / name)!r} is not listed in {str(path)!r}", root / name
            )
    for name, entry in files.items():
        verify_file(root / name, entry["size"], entry["sha256"])
    return True


# -- atomic publication ----------------------------------------------------------------


def _siblings(destination: Path) -> tuple[Path, Path]:
    return (
        destination.with_name(destination.name + ".tmp"),
        destination.with_name(destination.name + ".old"),
    )


def _complete(directory: Path) -> bool:
    """A cheap check (no hashing): the manifest is valid and every file has its size."""
    if not (directory / MANIFEST_NAME).is_file():
        return False
    try:
        files = read_manifest(directory)
    except CheckpointError:
        return False
    return all(
        (directory / n).is_file() and (directory / n).stat().st_size == e["size"]
        for n, e in files.items()
    )


def find_published(destination: str | Path) -> Path | None:
    """Where the newest complete copy of ``destination`` is, after any kill; else ``None``.

    ``destination`` itself when it exists (a loader then verifies it in full);
    else a complete ``<name>.tmp`` (killed between the two renames, the newer);
    else ``<name>.old`` (killed before the staged copy was complete).
    """
    final = Path(destination)
    staged, old = _siblings(final)
    if final.is_dir():
        return final
    if _complete(staged):
        return staged
    if old.is_dir() and (_complete(old) or not (old / MANIFEST_NAME).exists()):
        return old
    return None


def settle(destination: str | Path) -> None:
    """Finish or undo what a killed publication of ``destination`` left behind."""
    final = Path(destination)
    staged, old = _siblings(final)
    found = find_published(final)
    if found is not None and found != final:
        os.replace(found, final)
        _fsync(final.parent)
    if staged.exists():
        shutil.rmtree(staged)
    if old.exists():
        shutil.rmtree(old)


def stage_directory(destination: str | Path) -> Path:
    """A fresh, empty ``<name>.tmp`` beside ``destination`` to write a new copy into.

    Settles what an earlier killed save left first, so exactly one complete
    copy (or none) exists while the new one is written.
    """
    final = Path(destination)
    final.parent.mkdir(parents=True, exist_ok=True)
    settle(final)
    staged, _ = _siblings(final)
    staged.mkdir()
    return staged


def publish_directory(staged: str | Path, destination: str | Path) -> Path:
    """Write ``staged``'s manifest, then swap it in as ``destination``; returns ``destination``."""
    staged, final = Path(staged), Path(destination)
    write_manifest(staged)
    _, old = _siblings(final)
    if final.exists():
        if old.exists():
            shutil.rmtree(old)  # a stale leftover; ``final`` is complete
        os.replace(final, old)
    os.replace(staged, final)
    _fsync(final.parent)
    if old.exists():
        shutil.rmtree(old)
    return final
