"""The trainer's progress: one line per phase, each on its own clock, and the RL phase
counted in sampled tokens when a token budget (``TrainConfig.token_budget``) stops it.

The trainer's live bar (a terminal) and its progress lines (a pipe or a file) read
these, so a run that stops on its token budget moves to 100% as its tokens are
spent, instead of standing at the step count it never reaches.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from budgetmix.progress import ProgressLine
from budgetmix.training.algorithms.rl_groups import progress_of
from budgetmix.training.config import TrainConfig

__all__ = ["bar_completed", "phase_lines", "rl_done", "show_step"]


def phase_lines(
    cfg: TrainConfig, step: int, shown: bool, tokens: int = 0
) -> tuple[ProgressLine, ProgressLine]:
    """Progress lines of the SFT and the RL phase, resuming at global ``step`` with
    ``tokens`` sampled in RL so far. The trainer restarts the RL line's clock
    (:meth:`ProgressLine.begin`) when the RL phase starts."""
    enabled = None if shown else False  # None: only where stdout is not a terminal
    sft = ProgressLine("sft", cfg.sft_steps, start=min(step, cfg.sft_steps), enabled=enabled)
    if cfg.token_budget:
        rl = ProgressLine("rl", cfg.token_budget, start=tokens, enabled=enabled, unit="tokens")
    else:
        rl = ProgressLine("rl", cfg.steps, start=max(0, step - cfg.sft_steps), enabled=enabled)
    return sft, rl


def rl_done(cfg: TrainConfig, step: int, tokens: int) -> int:
    """The RL line's count at global ``step``: tokens under a token budget, else steps."""
    if cfg.token_budget:
        return min(tokens, cfg.token_budget)
    return max(0, step - cfg.sft_steps)


def bar_completed(cfg: TrainConfig, step: int, tokens: int) -> float:
    """The live bar's position out of ``sft_steps + steps``: the RL phase's share by its
    steps or, when sooner, its tokens (``rl_groups.progress_of``, the schedule's rule)."""
    rl = progress_of(max(0, step - cfg.sft_steps), cfg.steps, tokens, cfg.token_budget)
    return min(step, cfg.sft_steps) + cfg.steps * min(1.0, rl)


def show_step(
    cfg: TrainConfig, step: int, tokens: int, record: Mapping[str, Any],
    lines: Sequence[ProgressLine], bar: Any, task: Any,
) -> None:  # fmt: skip
    """Move the phase's progress line and the live bar (rich ``bar``'s ``task``) to global
    ``step`` just taken (``record``, its log record), ``tokens`` sampled in RL so far."""
    sft = step <= cfg.sft_steps
    lines[0 if sft else 1].update(step if sft else rl_done(cfg, step, tokens))
    shown = " ".join(
        f"{k}={float(record[k]):.3f}" for k in ("sft_loss", "reward", "success") if k in record
    )
    bar.update(task, completed=bar_completed(cfg, step, tokens),
               description=f"{record['phase']} {shown}")  # fmt: skip
