"""The KL reference of the RL phase: the policy as SFT left it, fixed when RL starts.

Without LoRA it is a frozen copy of the policy, saved next to the checkpoints
(``reference.safetensors``, its SHA-256 recorded in the checkpoint) and
verified when a run resumes. With LoRA it is the policy itself with its
adapter disabled (no second model): the SFT adapter is folded into the base
weights when RL starts (:func:`budgetmix.training.algorithms.lora.fold_adapter`), and
the checkpoints' weights carry that base.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from budgetmix.exceptions import CheckpointError

__all__ = ["REFERENCE_FILE", "KLReference"]

#: The frozen copy's file in the output directory (without LoRA).
REFERENCE_FILE = "reference.safetensors"


class KLReference:
    """Where the KL term's reference log-probs come from (nothing until :meth:`snapshot`)."""

    def __init__(self, out: Path, *, lora: bool) -> None:
        self.out = out
        self.lora = lora
        self.model: Any = None  # the frozen copy (without LoRA)
        self.sha256: str | None = None  # its checksum, recorded in the checkpoints
        self.is_base = False  # LoRA: the reference is the policy with its adapter disabled

    def snapshot(self, policy: Any, *, fold: bool, main: bool) -> None:
        """Fix the reference at ``policy`` now; with LoRA, ``fold`` the SFT adapter into the
        base first. Only the ``main`` process writes the copy's file."""
        if self.lora:
            from budgetmix.training.algorithms.lora import fold_adapter

            if fold:
                fold_adapter(policy)
            self.is_base = True
            return
        import copy

        from budgetmix.manifest import file_sha256, replace_file
        from safetensors.torch import save_model

        self.model = copy.deepcopy(policy).eval()
        if main:
            self.out.mkdir(parents=True, exist_ok=True)
            staged = self.out / f"{REFERENCE_FILE}.tmp"
            save_model(self.model, str(staged))
            self.sha256 = file_sha256(staged)
            replace_file(staged, self.out / REFERENCE_FILE)

    def load(self, policy: Any, sha256: Any) -> None:
        """Restore the reference of a resumed RL phase, verified against the checksum its
        checkpoint recorded (with LoRA the checkpoint's base weights are it: nothing to read).

        Raises:
            CheckpointError: the file is missing, damaged or cannot be loaded (names it).
        """
        if self.lora:
            self.is_base = True
            return
        import copy

        from budgetmix.manifest import file_sha256
        from safetensors import SafetensorError
        from safetensors.torch import load_model

        path = self.out / REFERENCE_FILE
        if not path.is_file():
            raise CheckpointError(f"resume: {str(path)!r} (the KL reference) is missing", path)
        if sha256 is not None and file_sha256(path) != sha256:
            raise CheckpointError(
                f"resume: {str(path)!r} is damaged: its sha256 checksum differs from the "
                "one the checkpoint saved",
                path,
            )
        self.model = copy.deepcopy(policy).eval()
        try:
            load_model(self.model, str(path))
        except (SafetensorError, OSError, RuntimeError) as exc:
            raise CheckpointError(f"resume: {str(path)!r} cannot be loaded: {exc!r}", path) from exc
        self.sha256 = sha256 if isinstance(sha256, str) else None

    @contextmanager
    def scoring(self, policy: Any) -> Iterator[Any]:
        """The model to compute reference log-probs with (``None`` before a snapshot)."""
        if not self.is_base:
            yield self.model
            return
        from budgetmix.training.algorithms.lora import adapter_disabled

        with adapter_disabled(policy) as base:
            yield base
