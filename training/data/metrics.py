"""Rollout statistics for the metrics log: reward, success, turns, exhaustion, per budget T."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from budgetmix.training.rollouts.rollout import Rollout

__all__ = ["MetricsLog", "RolloutSummary", "summarize", "summary_of"]

#: A rollout reduced to what the metrics need (small, JSON-able, gatherable across processes).
RolloutSummary = dict[str, Any]


def summary_of(r: Rollout) -> RolloutSummary:
    """Reduce a rollout to its budget, reward, success, turns, termination, token counts,
    whether its token ids drifted fatally (a template or boundary error), and its harmless
    drifts (non-canonical sampled tokens; sampled replies the template re-renders)."""
    return {
        "budget": r.budget.turns,
        "reward": r.reward,
        "success": r.success,
        "turns": r.num_turns,
        "termination": r.termination,
        "sampled_tokens": r.sampled_tokens,
        "tokens": len(r.prompt_ids) + len(r.response_ids),
        "drift": any(d.fatal for d in r.drifts),
        "noncanonical_spans": r.noncanonical_spans,
        "sampled_text_drifts": sum(d.kind == "sampled_text" for d in r.drifts),
    }


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def _block(rows: Sequence[RolloutSummary]) -> dict[str, float]:
    return {
        "n": float(len(rows)),
        "reward": _mean([r["reward"] for r in rows]),
        "success": _mean([float(r["success"]) for r in rows]),
        "turns": _mean([r["turns"] for r in rows]),
        "exhaustion_rate": _mean([float(r["termination"] == "budget_exhausted") for r in rows]),
    }


def summarize(rows: Sequence[RolloutSummary]) -> dict[str, Any]:
    """Overall means plus ``per_budget[T]`` blocks and termination counts."""
    out: dict[str, Any] = _block(rows)
    out["sampled_tokens"] = sum(r["sampled_tokens"] for r in rows)
    out["drift_count"] = sum(int(r["drift"]) for r in rows)
    out["noncanonical_spans"] = sum(int(r.get("noncanonical_spans", 0)) for r in rows)
    out["sampled_text_drifts"] = sum(int(r.get("sampled_text_drifts", 0)) for r in rows)
    terms: dict[str, int] = {}
    for r in rows:
        terms[r["termination"]] = terms.get(r["termination"], 0) + 1
    out["terminations"] = dict(sorted(terms.items()))
    budgets = sorted({int(r["budget"]) for r in rows})
    out["per_budget"] = {
        str(t): _block([r for r in rows if int(r["budget"]) == t]) for t in budgets
    }
    return out


class MetricsLog:
    """Append-only JSONL log; on resume it is cut back to the checkpoint's step."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def truncate_after(self, step: int) -> None:
        """Drop records of steps after ``step`` (written by a run killed after its checkpoint)."""
        if not self.path.exists():
            return
        kept = []
        for line in self.path.read_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line torn by the kill: its step reruns and is written again
            if int(record["step"]) <= step:
                kept.append(record)
        # write aside and rename, so a second kill here cannot cut the log short
        staged = self.path.with_name(self.path.name + ".tmp")
        staged.write_text("".join(json.dumps(r) + "\n" for r in kept))
        staged.replace(self.path)

    def write(self, record: Mapping[str, Any]) -> None:
        """Append ``record`` to the log as one JSON line."""
        with self.path.open("a") as fh:
            fh.write(json.dumps(dict(record)) + "\n")

    def read(self) -> list[dict[str, Any]]:
        """Every record of the log in order (none when the file does not exist yet)."""
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line]

    def extend(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Append each of ``records`` to the log, one JSON line apiece."""
        for r in records:
            self.write(r)
