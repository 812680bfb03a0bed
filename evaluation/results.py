"""Evaluation results: one :class:`EpisodeRecord` per episode, streamed to JSONL.

File layout (append-only, one JSON object per line):

* line 1, ``{"type": "header", "schema": 1, "fingerprint": ..., "identity": {...}}``:
  the fingerprint is a SHA-256 of ``identity`` (environment, agent, notice,
  seeds, fault injection — what makes an episode what it is). Writing to a file
  of another identity is refused (start afresh with ``overwrite``, ``budgetmix eval
  --overwrite``); the same identity resumes.
* ``{"type": "run", ...}``: one per invocation, with its grid (budgets, K, tasks).
  The grid may grow between invocations; only missing episodes run.
* ``{"type": "episode", ...}``: one per finished episode, written and flushed as
  it finishes. An episode is identified by ``(task_id, budget, sample)``.

A line cut short by a crash is skipped when reading, and a newline is added
before appending again, so nothing written before the crash is lost.

Shards (one run's grid split over several files or machines, each with the run's
identity) are read together with :func:`read_shards` and merged into one file with
:func:`merge_results` (``budgetmix eval-merge``); both refuse files of different
fingerprints, and so does :func:`read_results` for shard files concatenated into one.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, TextIO

from budgetmix.exceptions import ConfigError
from budgetmix.telemetry.redaction import redact_data

__all__ = [
    "SCHEMA_VERSION",
    "EpisodeRecord",
    "EvalRun",
    "ResultsFile",
    "ResultsWriter",
    "fingerprint",
    "merge_results",
    "read_results",
    "read_shards",
]

SCHEMA_VERSION = 1


def fingerprint(identity: Mapping[str, Any]) -> str:
    """Stable SHA-256 (first 16 hex digits) of a JSON-serialisable mapping."""
    text = json.dumps(identity, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True, kw_only=True)
class EpisodeRecord:
    """One finished episode of the grid.

    ``failure`` is a :data:`~budgetmix.evaluation.failures.FAILURE_CATEGORIES`
    value (``success`` for successes). ``derived`` marks a record obtained by
    truncating a longer run of a budget-blind agent (prefix sharing);
    ``extrapolated`` marks a budget above the declared training ceiling. The
    ``fault_*`` fields describe an injected failure at step ``fault_step``.
    """

    task_id: str
    budget: int
    sample: int
    seed: int
    env_seed: int
    success: bool
    status: str
    failure: str
    turns_used: int
    success_turn: int | None = None
    model_calls: int = 0
    env_calls: int = 0
    tool_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0
    steps_ok: int = 0
    mistakes: int = 0
    mistake_kinds: tuple[str, ...] = ()
    recoveries: int = 0
    recovered_mistakes: int = 0
    turns_to_recover: tuple[int, ...] = ()
    unrecovered: int = 0
    fault_step: int | None = None
    fault_injected: bool = False
    fault_recovered: bool | None = None
    fault_turns_to_recover: int | None = None
    derived: bool = False
    extrapolated: bool = False
    error: str | None = None

    @property
    def key(self) -> tuple[str, int, int]:
        """Where the episode sits in the grid: ``(task_id, budget, sample)``, unique per file."""
        return (self.task_id, self.budget, self.sample)

    def to_dict(self) -> dict[str, Any]:
        """Every field as a JSON-able dict (tuples as lists); :meth:`from_dict` reads it back."""
        d = asdict(self)
        d["mistake_kinds"] = list(self.mistake_kinds)
        d["turns_to_recover"] = list(self.turns_to_recover)
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EpisodeRecord:
        """Build from :meth:`to_dict` output; unknown keys are ignored (newer writers)."""
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in data.items() if k in names}
        kw["mistake_kinds"] = tuple(kw.get("mistake_kinds", ()))
        kw["turns_to_recover"] = tuple(kw.get("turns_to_recover", ()))
        return cls(**kw)


@dataclass(frozen=True, slots=True)
class EvalRun:
    """What one :meth:`Evaluator.run` did.

    ``records`` holds every record of the requested grid (earlier ones included).
    ``env_steps`` counts environment steps executed now; ``env_steps_separate`` is
    the sum of ``env_calls`` over the records produced now, i.e. what running every
    budget separately would have cost (the saving of prefix sharing is the difference).
    """

    path: Path
    records: tuple[EpisodeRecord, ...]
    live_episodes: int
    derived_records: int
    skipped: int
    env_steps: int
    env_steps_separate: int
    elapsed_s: float
    sees_budget: bool


@dataclass(frozen=True, slots=True)
class ResultsFile:
    """What a results file holds: header, run lines and records (first per key wins)."""

    header: Mapping[str, Any]
    runs: tuple[Mapping[str, Any], ...]
    records: tuple[EpisodeRecord, ...]


def read_results(path: str | os.PathLike[str]) -> ResultsFile:
    """Read a results file, skipping a truncated last line and duplicate keys.

    A later header line (shard files of one run concatenated) must carry the first
    one's fingerprint.

    Raises:
        ConfigError: the file is missing, has no header line, or holds the header of
            another run (the message names the line and both fingerprints).
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"results file {str(p)!r} does not exist")
    header: dict[str, Any] | None = None
    runs: list[Mapping[str, Any]] = []
    records: dict[tuple[str, int, int], EpisodeRecord] = {}
    with p.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by a crash
            kind = obj.get("type") if isinstance(obj, dict) else None
            if kind == "header" and header is None:
                header = obj
            elif kind == "header" and header is not None and _other_run(obj, header):
                raise ConfigError(
                    f"results file {str(p)!r}, line {number}: the header of another run "
                    f"(fingerprint {obj.get('fingerprint')} after {header.get('fingerprint')}); "
                    "files of different runs cannot be read as one"
                )
            elif kind == "run":
                runs.append(obj)
            elif kind == "episode":
                rec = EpisodeRecord.from_dict(obj)
                records.setdefault(rec.key, rec)
    if header is None:
        raise ConfigError(f"results file {str(p)!r} has no header line")
    return ResultsFile(header=header, runs=tuple(runs), records=tuple(records.values()))


def _other_run(header: Mapping[str, Any], first: Mapping[str, Any]) -> bool:
    return header.get("fingerprint") != first.get("fingerprint")


def read_shards(paths: Iterable[str | os.PathLike[str]]) -> ResultsFile:
    """Read the shard files of one run as one: the first file's header, every run line,
    the records of all (the first per key wins).

    Raises:
        ConfigError: no file, or files of different fingerprints (both named), or as
            :func:`read_results`.
    """
    files = [(Path(p), read_results(p)) for p in paths]
    if not files:
        raise ConfigError("results shards: no file given")
    (first, head), *rest = files
    for path, shard in rest:
        if _other_run(shard.header, head.header):
            raise ConfigError(
                f"results shards {str(first)!r} and {str(path)!r} are of different runs "
                f"(fingerprints {head.header.get('fingerprint')} and "
                f"{shard.header.get('fingerprint')}); merge only the shards of one run"
            )
    records: dict[tuple[str, int, int], EpisodeRecord] = {}
    for _, shard in files:
        for rec in shard.records:
            records.setdefault(rec.key, rec)
    runs = tuple(r for _, shard in files for r in shard.runs)
    return ResultsFile(header=head.header, runs=runs, records=tuple(records.values()))


def merge_results(
    out: str | os.PathLike[str],
    shards: Iterable[str | os.PathLike[str]],
    *,
    overwrite: bool = False,
) -> Path:
    """Write the shards of one run (:func:`read_shards`) as one results file ``out``:
    their header, run lines and records (sorted by key); returns its path.

    Raises:
        ConfigError: as :func:`read_shards`, or ``out`` exists and ``overwrite`` is off.
    """
    merged = read_shards(shards)
    target = Path(out)
    if target.exists() and not overwrite:
        raise ConfigError(
            f"results file {str(target)!r} exists; pass overwrite=True "
            "(budgetmix eval-merge --overwrite) to replace it"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    lines = [dict(merged.header), *merged.runs]
    lines += [{"type": "episode", **r.to_dict()} for r in sorted(merged.records, key=_key)]
    staged = target.with_name(target.name + ".tmp")
    staged.write_text("".join(json.dumps(x, sort_keys=True, default=str) + "\n" for x in lines))
    staged.replace(target)  # whole or not at all
    return target


def _key(record: EpisodeRecord) -> tuple[str, int, int]:
    return record.key


class ResultsWriter:
    """Appends records to a results file; resumes an existing one with the same identity.

    Use as a context manager. ``done`` holds the keys already in the file.

    Raises:
        ConfigError: the file exists with another fingerprint (and ``overwrite`` is off);
            the message names the flag that starts afresh.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        identity: Mapping[str, Any],
        *,
        overwrite: bool = False,
        fsync: bool = False,
    ) -> None:
        self.path = Path(path)
        self.identity = dict(identity)
        self.fingerprint = fingerprint(self.identity)
        self.fsync = fsync
        self.done: dict[tuple[str, int, int], EpisodeRecord] = {}
        if overwrite and self.path.exists():
            self.path.unlink()
        if self.path.exists() and self.path.stat().st_size > 0:
            existing = read_results(self.path)
            found = existing.header.get("fingerprint")
            if found != self.fingerprint:
                raise ConfigError(
                    f"results file {str(self.path)!r} was written by another run "
                    f"(fingerprint {found} != {self.fingerprint}); start afresh with "
                    "overwrite=True (budgetmix eval --overwrite) or write elsewhere (--out)"
                )
            self.done = {r.key: r for r in existing.records}
        self._fh: TextIO | None = None

    def __enter__(self) -> ResultsWriter:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fresh = not self.path.exists() or self.path.stat().st_size == 0
        if not fresh:
            with self.path.open("rb") as fh:
                fh.seek(-1, os.SEEK_END)
                cut = fh.read(1) != b"\n"
        self._fh = self.path.open("a", encoding="utf-8")
        if fresh:
            self._write(
                {
                    "type": "header",
                    "schema": SCHEMA_VERSION,
                    "fingerprint": self.fingerprint,
                    "identity": self.identity,
                    "created": time.time(),
                }
            )
        elif cut:
            self._fh.write("\n")  # keep a half-written line from swallowing the next one
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def write_run(self, grid: Mapping[str, Any]) -> None:
        """Record one invocation's grid."""
        self._write({"type": "run", "started": time.time(), **grid})

    def write(self, record: EpisodeRecord) -> None:
        """Append one record and flush it to the OS (and disk when ``fsync``)."""
        if record.key in self.done:
            return
        self.done[record.key] = record
        self._write({"type": "episode", **record.to_dict()})

    def write_many(self, records: Iterable[EpisodeRecord]) -> None:
        """Append each record whose key is not in the file yet (see :meth:`write`).

        Raises ``ConfigError`` when used outside the writer's with-block.
        """
        for r in records:
            self.write(r)

    def _write(self, obj: Mapping[str, Any]) -> None:
        if self._fh is None:
            raise ConfigError("ResultsWriter used outside its with-block")
        self._fh.write(json.dumps(redact_data(obj), sort_keys=True, default=str) + "\n")
        self._fh.flush()
        if self.fsync:
            os.fsync(self._fh.fileno())
