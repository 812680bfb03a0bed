"""One place that turns a missing training dependency into MissingExtraError."""

from __future__ import annotations

from budgetmix.exceptions import MissingExtraError

__all__ = ["require"]


def require(package: str, extra: str = "train") -> None:
    """Import ``package`` or raise MissingExtraError naming the extra to install.

    Raises:
        MissingExtraError: ``package`` cannot be imported.
    """
    try:
        __import__(package)
    except ImportError as exc:
        raise MissingExtraError(package, extra) from exc
