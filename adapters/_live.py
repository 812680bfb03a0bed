"""Budgeted clients and transports survive the copies frameworks make of their settings.

A framework copies what it is configured with: DSPy deep-copies an ``LM``'s keyword
arguments, others deep-copy or pickle a config object. A budgeted client or transport is
a handle on live connections, a controller and its ledgers: a copy that charged a ledger
of its own would be no budget at all, and the locks of its HTTP client make a real copy
fail (``cannot pickle '_thread.RLock'``). So :class:`LiveHandle` copies to itself:
``copy.copy`` and ``copy.deepcopy`` return the object, and pickling stores a reference
that unpickles, in the same process, to that same object (in another process, or once
the object is gone, unpickling raises :class:`pickle.UnpicklingError` saying to build
it there).
"""

from __future__ import annotations

import itertools
import os
import pickle
import weakref
from typing import Any, Self

__all__ = ["LiveHandle"]

_LIVE: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
_IDS = itertools.count(1)


def _restore(pid: int, key: int, what: str) -> Any:
    """The live object a pickle refers to (see the module docstring)."""
    found = _LIVE.get(key) if pid == os.getpid() else None
    if found is None:
        raise pickle.UnpicklingError(
            f"a budgeted {what} is a live handle (connections, a controller's ledgers): it "
            "unpickles only in the process that made it, while it exists; build it with "
            "budgetmix where it is used"
        )
    return found


class LiveHandle:
    """A mixin: copies and pickles of the object are the object itself (in-process)."""

    __slots__ = ()

    def __copy__(self) -> Self:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Self:
        return self

    def __reduce__(self) -> tuple[Any, tuple[int, int, str]]:
        key = next(_IDS)
        _LIVE[key] = self
        return _restore, (os.getpid(), key, type(self).__name__)
