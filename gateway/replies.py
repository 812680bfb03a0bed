"""What the gateway answers itself, in the wire's own format, and how it sends bytes.

Errors are the provider's error shape (OpenAI ``{"error": {...}}``, Anthropic
``{"type": "error", "error": {...}}``), so each SDK raises its usual exception with the
message; a budget stop with ``on_exhausted="respond"`` is a final assistant message
(:func:`budgetmix.adapters._wire.terminal_body` / ``terminal_stream``, the transport's own).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from budgetmix.adapters._wire import WireKind, terminal_body, terminal_stream

__all__ = ["Send", "error_reply", "exhausted_reply", "send_bytes", "send_start"]

Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    431: "request_too_large",
    502: "api_error",
    503: "overloaded_error",
}


def error_body(kind: WireKind | None, status: int, message: str, code: str) -> bytes:
    """The error body of ``kind``'s provider (OpenAI's shape for anything else)."""
    kind_name = _TYPES.get(status, "api_error")
    if kind == "anthropic":
        body: dict[str, Any] = {"type": "error", "error": {"type": kind_name, "message": message}}
    else:
        body = {"error": {"message": message, "type": kind_name, "code": code, "param": None}}
    return json.dumps(body).encode()


async def send_start(send: Send, status: int, headers: list[tuple[bytes, bytes]]) -> None:
    """The response's status line and headers."""
    await send({"type": "http.response.start", "status": status, "headers": headers})


async def send_bytes(
    send: Send, status: int, body: bytes, content_type: bytes = b"application/json",
    extra: tuple[tuple[bytes, bytes], ...] = (),
) -> None:  # fmt: skip
    """A whole response."""
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    await send_start(send, status, [*headers, *extra])
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def error_reply(
    send: Send, kind: WireKind | None, status: int, message: str, code: str
) -> None:
    """A refusal in ``kind``'s error format; ``x-should-retry: false`` (the SDKs obey it)
    except for 503, which a client may retry."""
    extra = () if status == 503 else ((b"x-should-retry", b"false"),)
    await send_bytes(send, status, error_body(kind, status, message, code), extra=extra)


async def exhausted_reply(
    send: Send, kind: WireKind, body: dict[str, Any], text: str, *, respond: bool
) -> None:
    """A budget stop: a final assistant message (streamed when asked) or a 429."""
    if not respond:
        await error_reply(send, kind, 429, text, "budget_exhausted")
        return
    model = body.get("model")
    name = model if isinstance(model, str) else ""
    extra = ((b"x-budgetmix-exhausted", b"true"),)
    if body.get("stream") is True:
        await send_bytes(send, 200, terminal_stream(kind, name, text), b"text/event-stream", extra)
    else:
        whole = json.dumps(terminal_body(kind, name, text)).encode()
        await send_bytes(send, 200, whole, extra=extra)
