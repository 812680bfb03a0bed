"""Which episode a model request through the HTTP transport charges: the attribution rule.

The first that applies:

1. the transport's target is an :class:`~budgetmix.Episode`: that episode;
2. the request is made inside an episode of the target controller (of any controller
   when the target is ``None``): that episode. Bind it at the framework's entry point
   (``with controller.episode(): agent.run(...)``); the context variable is carried into
   the asyncio tasks the framework creates and into threads started through
   ``asyncio.to_thread`` or ``contextvars.copy_context().run``, not into those of a
   bare ``ThreadPoolExecutor``. Two runs in two such episodes keep two budgets, however
   alike their prompts;
3. an ``x-budgetmix-conversation`` header (:data:`CONVERSATION_HEADER`, removed before
   the request is forwarded): the open episode with that id, if the transport has seen
   it (rule 2), else the transport's own conversation of that name;
4. a Responses ``previous_response_id`` naming a response the transport read (whole, or
   streamed to its end): that response's episode, while it is open;
5. the transport has seen exactly one episode (rule 2) that is still open: that one (a
   framework's worker thread that lost the context). Several: the request is refused
   with :class:`~budgetmix.ConfigError`, as it cannot be told apart; nothing is sent
   or charged;
6. a ``None`` target: not budgeted (it passes through, as outside any episode);
7. a controller target: the transport's own conversation ``"default"``, one per
   transport until :meth:`~budgetmix.adapters.http.BudgetTransport.finish` closes it. A
   warning is logged the first time, as every run that is not told apart (two
   concurrent ones included) shares its budget. With ``unattributed="refuse"`` such a
   request is refused with :class:`~budgetmix.ConfigError` instead.

The history is never used to tell conversations apart: frameworks rewrite it (smolagents
appends each error to its first user message), and runs with the same prompt have the
same one. No rule gives a request a fresh budget of its own.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import weakref
from typing import Any, Literal

from budgetmix.adapters._endpoints import Target, resolve_episode
from budgetmix.adapters._replies import sdk_safe
from budgetmix.controller import BudgetController
from budgetmix.episode import Episode
from budgetmix.events import EpisodeResult
from budgetmix.exceptions import ConfigError

__all__ = ["CONVERSATION_HEADER", "DEFAULT_CONVERSATION", "Attribution", "Unattributed"]

log = logging.getLogger("budgetmix")

#: Request header naming the conversation (or the open episode, by id) a request belongs to.
CONVERSATION_HEADER = "x-budgetmix-conversation"
#: The transport's own conversation for requests nothing else attributes.
DEFAULT_CONVERSATION = "default"
Unattributed = Literal["share", "refuse"]

_HOW = (
    "bind an episode around the framework's entry point (with controller.episode(): ...; "
    "threads need contextvars.copy_context().run) or send the x-budgetmix-conversation "
    "header; nothing was sent (no turn was charged)"
)


class Attribution:
    """The episodes a transport charges: those it has seen bound, and those it owns."""

    def __init__(self, target: Target, unattributed: Unattributed) -> None:
        if unattributed not in ("share", "refuse"):
            raise ConfigError(f"unattributed: must be 'share' or 'refuse', got {unattributed!r}")
        self.target = target
        self.unattributed: Unattributed = unattributed
        self._seen: weakref.WeakValueDictionary[str, Episode] = weakref.WeakValueDictionary()
        self._by_response: weakref.WeakValueDictionary[str, Episode] = weakref.WeakValueDictionary()
        self._owned: dict[str, tuple[Episode, contextvars.Context]] = {}
        self._warned = False
        self._lock = threading.Lock()

    def bound(self) -> Episode | None:
        """Rules 1 and 2: the target episode, or the one the request is made in."""
        ep = resolve_episode(self.target)
        if ep is not None and ep.id not in self._seen:
            self._seen[ep.id] = ep
        return ep

    def episode_for(self, conversation: str | None, body: dict[str, Any]) -> Episode | None:
        """The episode a request charges (``None``: not budgeted); ``conversation``: its
        header's value.

        Raises:
            ConfigError: (SDK-safe) the request cannot be attributed (rule 5, or rule 7
                with ``unattributed="refuse"``).
        """
        ep = self.bound()
        if ep is not None:
            return ep
        if conversation:
            seen = self._seen.get(conversation)
            if seen is not None and not seen.finished:
                return seen
            if isinstance(self.target, BudgetController):
                return self._owned_episode(conversation)
        prev = body.get("previous_response_id")
        chained = self._by_response.get(prev) if isinstance(prev, str) else None
        if chained is not None and not chained.finished:
            return chained
        open_eps = [e for e in list(self._seen.values()) if not e.finished]
        if len(open_eps) == 1:
            return open_eps[0]
        if len(open_eps) > 1:
            raise sdk_safe(
                ConfigError(
                    f"budgetmix cannot tell which of {len(open_eps)} open episodes this "
                    f"request belongs to (it was made outside all of them): {_HOW}"
                )
            )
        if not isinstance(self.target, BudgetController):
            return None
        if self.unattributed == "refuse":
            raise sdk_safe(
                ConfigError(f"budgetmix cannot attribute this request to an episode: {_HOW}")
            )
        if not self._warned:
            self._warned = True
            log.warning(
                "budgetmix: a model request was made outside any episode; it charges the "
                "transport's own conversation %r, which every such run shares (%s)",
                DEFAULT_CONVERSATION,
                "bind an episode per run, or send the x-budgetmix-conversation header",
            )
        return self._owned_episode(DEFAULT_CONVERSATION)

    def _owned_episode(self, key: str) -> Episode:
        assert isinstance(self.target, BudgetController)
        with self._lock:
            found = self._owned.get(key)
            if found is None:
                ep = self.target.episode(metadata={"conversation": key}, conversation_id=key)
                # entered in a copy of the context: the caller's current episode stays
                ctx = contextvars.copy_context()
                ctx.run(ep.__enter__)
                found = self._owned[key] = (ep, ctx)
        return found[0]

    def answered(self, response_id: Any, episode: Episode) -> None:
        """A Responses response ``response_id`` was read for ``episode`` (rule 4)."""
        if isinstance(response_id, str) and response_id:
            self._by_response[response_id] = episode

    @property
    def episodes(self) -> dict[str, Episode]:
        """Episodes the transport opened, by conversation."""
        return {k: ep for k, (ep, _) in self._owned.items()}

    def finish(self, conversation: str | None, success: bool) -> list[EpisodeResult]:
        """Close owned episodes (one, or all) and return their results."""
        with self._lock:
            keys = [conversation] if conversation is not None else list(self._owned)
            closing = [self._owned.pop(k) for k in keys if k in self._owned]
        results: list[EpisodeResult] = []
        for ep, ctx in closing:
            if not ep.finished:
                ctx.run(ep.finish, success)
            ctx.run(ep.__exit__, None, None, None)
            if ep.result is not None:
                results.append(ep.result)
        return results
