"""Warnings for a budget that a framework's wiring bypasses without a word.

A request the budget never saw cannot be counted, but two signs of one can be seen:

* an episode ends having charged no turn although its controller was handed a budgeted
  client or transport (the framework sent its requests through a client of its own:
  an async run given only a sync client, a client it builds from its own settings);
* a budgeted client is called with no episode to charge (nothing is counted).

Each logs one warning on the ``budgetmix`` logger naming the likely cause and the fix
(the first time per controller, resp. per client). The wrappers and transports of
:mod:`budgetmix.adapters` report themselves here; see docs/integrations.md.
"""

from __future__ import annotations

import logging
import weakref
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from budgetmix.controller import BudgetController
    from budgetmix.events import EpisodeResult

__all__ = ["episode_closed", "unbudgeted_call", "wired"]

log = logging.getLogger("budgetmix")

# per controller: the budgeted clients and transports it was handed (their kinds)
_WIRED: weakref.WeakKeyDictionary[BudgetController, set[str]] = weakref.WeakKeyDictionary()
_WARNED: weakref.WeakSet[BudgetController] = weakref.WeakSet()
_CALLS_WARNED: weakref.WeakSet[object] = weakref.WeakSet()


def wired(controller: BudgetController, what: str) -> None:
    """``controller`` was handed a budgeted client or transport (``what``: its kind)."""
    _WIRED.setdefault(controller, set()).add(what)


def episode_closed(controller: BudgetController, result: EpisodeResult) -> None:
    """An episode of ``controller`` ended: warn (once per controller) when it charged no
    turn although the controller has a budgeted client or transport."""
    kinds = _WIRED.get(controller)
    if not kinds or result.used["turns"] or controller in _WARNED:
        return
    _WARNED.add(controller)
    log.warning(
        "budgetmix: episode %r ended having charged no turn, although its controller was "
        "handed %s: the framework most likely sent its requests through a client of its "
        "own (an async run given only a sync client or transport builds one; so does a "
        "framework that ignores the client it was given), so nothing was budgeted. Hand "
        "it the budgeted client or transport for the way it calls (AsyncBudgetTransport or "
        "budgeted(AsyncOpenAI()) for async runs); see docs/integrations.md",
        result.name,
        " and ".join(sorted(kinds)),
    )


def unbudgeted_call(client: object, what: str) -> None:
    """A budgeted client ``client`` (``what``: its kind) was called with no episode to
    charge: warn once per client."""
    try:
        if client in _CALLS_WARNED:
            return
        _CALLS_WARNED.add(client)
    except TypeError:  # not weakly referenceable: warn every time
        pass
    log.warning(
        "budgetmix: %s called outside an episode: the request was sent unbudgeted (no "
        "turn charged, no limit applied). Call it inside `with controller.episode():` "
        "(or pass the Episode as its target)",
        what,
    )
