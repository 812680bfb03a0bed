"""Token ids from an OpenAI-compatible server: asking for them, reading them, stitching turns.

vLLM returns the ids a Chat Completions request was fed and sampled when asked
(``return_token_ids``: ``prompt_token_ids`` at the top level and
``choices[0].token_ids``; ``logprobs`` with ``return_tokens_as_token_ids``: a
``"token_id:<id>"`` token and a log-prob per sampled id). :class:`TokenCapture`,
an httpx transport under the OpenAI client, asks every request for them and
records each response's :class:`Exchange` in the :class:`TokenLog` of the
episode played in its thread (:data:`token_log`). The client is then handed the
response without the ids and log-probs it did not ask for, so the OpenAI SDK does not
build a model object per sampled token (about 10 ms per 2,000-token reply, against 0.7
ms for the same reply without them). A client that asks for log-probs itself gets them
as the server wrote them for the request as sent: with
``return_tokens_as_token_ids``, each ``token`` reads ``"token_id:<id>"``, not text.
:func:`stitch` turns one episode's exchanges into training rows (see
:mod:`budgetmix.training.serving.server_rollout`).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import httpx
from budgetmix.exceptions import ConfigError

__all__ = [
    "TOKEN_FIELDS",
    "AsyncTokenCapture",
    "Exchange",
    "StitchedRow",
    "TokenCapture",
    "TokenLog",
    "exchange_of",
    "stitch",
    "token_log",
]

#: What every Chat Completions request is given (vLLM's names for the ids and log-probs).
TOKEN_FIELDS: Mapping[str, Any] = {
    "return_token_ids": True,
    "logprobs": True,
    "top_logprobs": 0,
    "return_tokens_as_token_ids": True,
}


@dataclass(frozen=True, slots=True)
class Exchange:
    """One request and its response: the ids the server was fed and the ids it sampled."""

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finish_reason: str
    messages: tuple[dict[str, Any], ...] = field(repr=False, default=())
    reply: dict[str, Any] = field(repr=False, default_factory=dict)


def _completion_ids(choice: Mapping[str, Any], content: Sequence[Any]) -> list[int]:
    ids = choice.get("token_ids")
    if isinstance(ids, list):
        return list(map(int, ids))
    tokens = [c.get("token", "") if isinstance(c, dict) else "" for c in content]
    if content and all(isinstance(t, str) and t.startswith("token_id:") for t in tokens):
        return [int(t.removeprefix("token_id:")) for t in tokens]  # return_tokens_as_token_ids
    raise ConfigError(
        "server response has no 'choices[0].token_ids' (nor 'token_id:<id>' log-prob tokens): "
        "serve with a vLLM whose Chat Completions take return_token_ids=true"
    )


def exchange_of(request: Mapping[str, Any], response: Mapping[str, Any]) -> Exchange:
    """The ids and log-probs of one Chat Completions response (vLLM's fields).

    Raises:
        ConfigError: the response lacks ``prompt_token_ids``, the completion ids or the
            log-probs (the message names the field).
    """
    prompt = response.get("prompt_token_ids")
    if not isinstance(prompt, list):
        raise ConfigError(
            "server response has no 'prompt_token_ids': the server must return the ids it "
            "was fed for return_token_ids=true (as vLLM does)"
        )
    choices = response.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else {}
    logprobs = choice.get("logprobs") if isinstance(choice, dict) else None
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list):
        raise ConfigError("server response has no 'choices[0].logprobs.content' (logprobs=true)")
    ids = _completion_ids(choice, content)
    if len(content) != len(ids):
        raise ConfigError(
            f"server response: {len(ids)} completion ids but {len(content)} log-probs"
        )
    return Exchange(  # map: a 2,000-token reply is read in C, not a Python loop per id
        prompt_ids=tuple(map(int, prompt)),
        completion_ids=tuple(ids),
        logprobs=tuple(map(float, map(itemgetter("logprob"), content))),
        finish_reason=str(choice.get("finish_reason") or ""),
        messages=tuple(request.get("messages") or ()),
        reply=dict(choice.get("message") or {}),
    )


# -- the HTTP transport --------------------------------------------------------------------
@dataclass(slots=True)
class TokenLog:
    """What one episode's requests recorded (:data:`token_log` is set to it in the
    episode's thread): its exchanges, or the error that made its ids unreadable."""

    exchanges: list[Exchange] = field(default_factory=list)
    error: ConfigError | None = None


#: The token log of the episode played in this thread (``None``: nothing is recorded).
token_log: ContextVar[TokenLog | None] = ContextVar("budgetmix_token_log", default=None)


@dataclass(frozen=True, slots=True)
class _Asked:
    """A Chat Completions request as sent: its body (with :data:`TOKEN_FIELDS`), the
    request, and what the client asked for itself (kept in the response it is handed)."""

    body: dict[str, Any]
    sent: httpx.Request
    ids: bool
    logprobs: bool


def _asked(request: httpx.Request) -> _Asked | None:
    """A whole Chat Completions request as sent with :data:`TOKEN_FIELDS`; ``None`` for
    anything else. A streamed one inside an episode marks the episode's log as failed
    (it carries no ids)."""
    if request.method != "POST" or not request.url.path.endswith("/chat/completions"):
        return None
    body = json.loads(request.content or b"{}")
    if not isinstance(body, dict):
        return None
    slot = token_log.get()
    if body.get("stream"):
        if slot is not None and slot.error is None:
            slot.error = ConfigError(
                "server rollouts read whole responses: a Chat Completions request with "
                "stream=true has no token ids to train on (send stream=false)"
            )
        return None
    ids, logprobs = bool(body.get("return_token_ids")), bool(body.get("logprobs"))
    body = {**TOKEN_FIELDS, **body}
    headers = [(k, v) for k, v in request.headers.items() if k.lower() != "content-length"]
    sent = httpx.Request(
        request.method,
        request.url,
        headers=headers,
        content=json.dumps(body).encode(),
        extensions=request.extensions,
    )
    return _Asked(body, sent, ids, logprobs)


def _trimmed(asked: _Asked, response: Any) -> bytes | None:
    """``response`` (parsed) without the ids and log-probs the client did not ask for,
    as JSON; ``None`` when it asked for all of them (the body is handed on as is)."""
    if (asked.ids and asked.logprobs) or not isinstance(response, dict):
        return None
    if not asked.ids:
        response.pop("prompt_token_ids", None)
    choices = response.get("choices")
    for choice in choices if isinstance(choices, list) else ():
        if isinstance(choice, dict):
            if not asked.ids:
                choice.pop("token_ids", None)
            if not asked.logprobs and "logprobs" in choice:
                choice["logprobs"] = None
    return json.dumps(response).encode()


def _answered(asked: _Asked, status: int, headers: httpx.Headers, content: bytes) -> httpx.Response:
    """Record the response's exchange in this episode's log; the response for the SDK
    (what the client asked for: see :func:`_trimmed`)."""
    slot = token_log.get()
    if status == 200:
        try:
            response = json.loads(content)
        except ValueError as exc:
            response = None
            if slot is not None and slot.error is None:
                slot.error = ConfigError(f"server response is not JSON: {exc}")
        if response is not None and slot is not None and slot.error is None:
            try:
                slot.exchanges.append(exchange_of(asked.body, response))
            except (ConfigError, ValueError, KeyError, TypeError, AttributeError) as exc:
                slot.error = exc if isinstance(exc, ConfigError) else ConfigError(str(exc))
        content = _trimmed(asked, response) or content
    drop = ("content-length", "content-encoding", "transfer-encoding")
    kept = [(k, v) for k, v in headers.items() if k.lower() not in drop]
    return httpx.Response(status, headers=kept, content=content, request=asked.sent)


class TokenCapture(httpx.BaseTransport):
    """An httpx transport that asks for token ids and records them (see the module docstring).

    Chat Completions requests (not streamed) get :data:`TOKEN_FIELDS` (fields the
    request already sets are kept); the response's ids go to the episode being
    played in this context (:data:`token_log`), if any, and the client gets the
    response without the ids and log-probs it did not ask for itself. Other requests
    pass through untouched; a streamed one inside an episode fails its batch (no ids).
    """

    def __init__(self, inner: httpx.BaseTransport | None = None) -> None:
        self.inner = inner if inner is not None else httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` (with the token fields added) and record what came back."""
        request.read()
        asked = _asked(request)
        if asked is None:
            return self.inner.handle_request(request)
        response = self.inner.handle_request(asked.sent)
        content = response.read()
        response.close()
        return _answered(asked, response.status_code, response.headers, content)

    def close(self) -> None:
        """Close the inner transport."""
        self.inner.close()


class AsyncTokenCapture(httpx.AsyncBaseTransport):
    """The ``httpx.AsyncClient`` twin of :class:`TokenCapture` (``openai.AsyncOpenAI``)."""

    def __init__(self, inner: httpx.AsyncBaseTransport | None = None) -> None:
        self.inner = inner if inner is not None else httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` (with the token fields added) and record what came back."""
        await request.aread()
        asked = _asked(request)
        if asked is None:
            return await self.inner.handle_async_request(request)
        response = await self.inner.handle_async_request(asked.sent)
        content = await response.aread()
        await response.aclose()
        return _answered(asked, response.status_code, response.headers, content)

    async def aclose(self) -> None:
        """Close the inner transport."""
        await self.inner.aclose()


# -- stitching -----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class StitchedRow:
    """One training row: prompt ids, response ids, mask (1 on sampled ids), log-probs."""

    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    response_mask: tuple[int, ...]
    logprobs: tuple[float, ...]


def stitch(exchanges: Sequence[Exchange]) -> tuple[list[StitchedRow], int | None]:
    """The training rows of one episode's exchanges, and the first turn (1-based) whose
    prompt does not start with the previous prompt + completion (``None``: one row)."""
    for turn, (cur, nxt) in enumerate(itertools.pairwise(exchanges), start=2):
        head = cur.prompt_ids + cur.completion_ids
        if nxt.prompt_ids[: len(head)] != head:
            rows = [
                StitchedRow(
                    e.prompt_ids, e.completion_ids, (1,) * len(e.completion_ids), e.logprobs
                )
                for e in exchanges
            ]
            return rows, turn
    if not exchanges:
        return [], None
    last = exchanges[-1]
    ids = last.prompt_ids + last.completion_ids
    mask, logps = [0] * len(ids), [0.0] * len(ids)
    for e in exchanges:
        start = len(e.prompt_ids)
        mask[start : start + len(e.completion_ids)] = [1] * len(e.completion_ids)
        logps[start : start + len(e.completion_ids)] = e.logprobs
    cut = len(exchanges[0].prompt_ids)
    return [StitchedRow(ids[:cut], ids[cut:], tuple(mask[cut:]), tuple(logps[cut:]))], None
