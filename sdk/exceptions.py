"""The budgetmix exception tree.

::

    BudgetmixError
     ├── ConfigError (also ValueError)        bad Budget, policy or config values
     ├── MissingExtraError (also ImportError) an optional extra is not installed
     ├── BudgetExhausted                      a limit refused a turn or tool batch
     ├── EarlyStopped                         an early-stop policy ended the episode
     ├── CheckpointError                      a checkpoint or model directory is damaged,
     │                                        incomplete, or missing where one is required
     └── ProviderError                        a provider call failed after retries
          └── ResponseFormatError             a provider answered with an unusable body

Budget errors carry the ledger counts and the partial transcript so callers
never lose what the episode did before it stopped. A provider's own exception
becomes one of these at one boundary, :func:`budgetmix.provider_errors.map_provider_error`,
and is kept as the ``__cause__``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "BudgetExhausted",
    "BudgetmixError",
    "CheckpointError",
    "ConfigError",
    "EarlyStopped",
    "MissingExtraError",
    "ProviderError",
    "ResponseFormatError",
]


class BudgetmixError(Exception):
    """Root of every error budgetmix raises on purpose."""


class ConfigError(BudgetmixError, ValueError):
    """A value given to budgetmix is invalid; the message names the field."""


class MissingExtraError(BudgetmixError, ImportError):
    """An optional dependency is missing; the message names the extra to install."""

    def __init__(self, package: str, extra: str) -> None:
        super().__init__(
            f"{package!r} is not installed; install it with `pip install 'budgetmix[{extra}]'`"
        )
        self.package = package
        self.extra = extra


class BudgetExhausted(BudgetmixError):
    """A limit refused a model turn or a tool batch before anything was sent.

    Attributes:
        dimension: the limit that stopped the episode (``"turns"``, ``"tool_calls"``, ...).
        used: counts per dimension at the moment of refusal.
        limits: the limits in force per dimension.
        transcript: messages the episode recorded before it stopped.
        episode_id: the episode the refusal belongs to.
    """

    def __init__(
        self,
        dimension: str,
        used: Mapping[str, float],
        limits: Mapping[str, float | None],
        transcript: Sequence[Any] = (),
        episode_id: str | None = None,
    ) -> None:
        limit = limits.get(dimension)
        super().__init__(
            f"budget exhausted on {dimension}: used {used.get(dimension, 0):g} of {limit}"
        )
        self.dimension = dimension
        self.used = dict(used)
        self.limits = dict(limits)
        self.transcript = list(transcript)
        self.episode_id = episode_id


class EarlyStopped(BudgetmixError):
    """An early-stop policy ended the episode; ``reason`` says why."""

    def __init__(self, reason: str, episode_id: str | None = None) -> None:
        super().__init__(f"episode stopped early: {reason}")
        self.reason = reason
        self.episode_id = episode_id


class CheckpointError(BudgetmixError):
    """A saved directory cannot be trusted or used; the message names the file.

    Raised when a file listed in a checkpoint's ``manifest.json`` is missing,
    has the wrong size or a different checksum, when a checkpoint file cannot
    be parsed, or when ``resume`` finds nothing to resume.

    Attributes:
        path: the damaged file (or the directory, when the whole directory is at fault).
    """

    def __init__(self, message: str, path: str | os.PathLike[str]) -> None:
        super().__init__(message)
        self.path = Path(path)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), str(self.path)))


class ProviderError(BudgetmixError):
    """A provider call failed after the retry policy gave up.

    ``status_code`` is the HTTP status when there was one; ``retryable`` says
    whether the failure was of a transient kind.
    """

    def __init__(
        self, message: str, *, status_code: int | None = None, retryable: bool = False
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.retryable = retryable


class ResponseFormatError(ProviderError):
    """The provider answered, but the body could not be used."""
