"""The gateway's own endpoints under ``/budgetmix/``: health, a tenant's own budget, and
the admin API behind its own token.

* ``GET /budgetmix/health``: ``{"ok": true}``.
* ``GET /budgetmix/budget``: the caller's own budget (the tenant its API key or trusted
  header names; with ``x-budgetmix-conversation``, that conversation's too). A tenant
  can read only its own: the keys are derived from its credential.
* With ``Authorization: Bearer <admin token>`` (``admin_token``; without one configured
  the admin API answers 404, a wrong token 401):
  ``GET /budgetmix/admin/tenants/{tenant}`` (the current window),
  ``GET /budgetmix/admin/tenants/{tenant}/conversations/{conversation}``, and ``POST``
  to either with ``/grant`` appended and a body ``{"turns": 5, "cost_usd": 1.0}``: an
  extension of that ledger's limits. ``{tenant}`` is as :mod:`~budgetmix.gateway.scopes`
  names it (``k.<hash>``, ``h.<header value>``).
"""

from __future__ import annotations

import hmac
import json
import re
from typing import Any

from budgetmix import ConfigError
from budgetmix.budget import DIMENSIONS, check_limit
from budgetmix.gateway.config import GatewayConfig
from budgetmix.gateway.replies import Send, send_bytes
from budgetmix.gateway.scopes import (
    CONVERSATION_HEADER,
    BadRequest,
    conversation_key,
    tenant_key,
    tenant_of,
)
from budgetmix.stores import LedgerRecord, LedgerStore, StoreError

__all__ = ["Admin"]

_ROUTE = re.compile(r"^/budgetmix/admin/tenants/([^/]+)(?:/conversations/(.+?))?(/grant)?$")


def _view(record: LedgerRecord | None) -> dict[str, Any] | None:
    if record is None:
        return None
    limits = {d: cap for d, cap in record.limits.items() if cap is not None}
    remaining = {d: max(0.0, cap - record.used.get(d, 0)) for d, cap in limits.items()}
    return {"limits": limits, "used": dict(record.used), "remaining": remaining}


async def _json(send: Send, status: int, body: Any) -> None:
    await send_bytes(send, status, json.dumps(body).encode())


class Admin:
    """The ``/budgetmix/`` endpoints over one store."""

    def __init__(self, config: GatewayConfig, store: LedgerStore) -> None:
        self.config = config
        self.store = store

    async def handle(
        self, method: str, path: str, headers: dict[str, str], body: bytes, send: Send
    ) -> None:
        """Answer one request under ``/budgetmix/``."""
        try:
            if path == "/budgetmix/health":
                await _json(send, 200, {"ok": True})
            elif path == "/budgetmix/budget" and method == "GET":
                await _json(send, 200, self._own(headers))
            elif path.startswith("/budgetmix/admin/"):
                await self._admin(method, path, headers, body, send)
            else:
                await _json(send, 404, {"error": f"no endpoint {method} {path}"})
        except BadRequest as exc:
            await _json(send, 400, {"error": str(exc)})
        except StoreError as exc:
            await _json(send, 503, {"error": f"the budget store is unavailable: {exc}"})

    def _own(self, headers: dict[str, str]) -> dict[str, Any]:
        cfg = self.config
        tenant = tenant_of(headers, cfg.tenant_header)
        out: dict[str, Any] = {"tenant": tenant, "window": None, "conversation": None}
        if cfg.tenant is not None:
            out["window"] = _view(self.store.read(tenant_key(tenant, cfg.tenant_window_seconds)))
        conversation = headers.get(CONVERSATION_HEADER)
        if conversation:
            out["conversation"] = _view(self.store.read(conversation_key(tenant, conversation)))
        return out

    def _authorized(self, headers: dict[str, str]) -> bool:
        token = self.config.admin_token
        given = headers.get("authorization", "")
        expected = f"Bearer {token}"
        return hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode())

    async def _admin(
        self, method: str, path: str, headers: dict[str, str], body: bytes, send: Send
    ) -> None:
        if self.config.admin_token is None:
            await _json(send, 404, {"error": "the admin API is off (no admin token configured)"})
            return
        if not self._authorized(headers):
            await _json(send, 401, {"error": "admin API: a valid admin bearer token is required"})
            return
        match = _ROUTE.match(path)
        if match is None:
            await _json(send, 404, {"error": f"no endpoint {method} {path}"})
            return
        tenant, conversation, grant = match.groups()
        if conversation is not None:
            key = conversation_key(tenant, conversation)
        else:
            key = tenant_key(tenant, self.config.tenant_window_seconds)
        if grant and method == "POST":
            record = self.store.read(key)
            if record is None:
                await _json(send, 404, {"error": f"no ledger for {path[:-6]}"})
                return
            try:
                record = self.store.grant(key, _amounts(body))
            except ConfigError as exc:
                raise BadRequest(str(exc)) from None
            await _json(send, 200, _view(record))
        elif not grant and method == "GET":
            view = _view(self.store.read(key))
            await _json(send, 200 if view is not None else 404, view or {"error": "no ledger"})
        else:
            await _json(send, 405, {"error": f"{method} is not allowed on {path}"})


def _amounts(body: bytes) -> dict[str, float]:
    try:
        data = json.loads(body or b"{}")
    except ValueError:
        raise BadRequest("grant: the body is not JSON") from None
    if not isinstance(data, dict) or not data:
        raise BadRequest('grant: expected an object of amounts, e.g. {"turns": 5}')
    out: dict[str, float] = {}
    for dim, amount in data.items():
        if dim not in DIMENSIONS or dim == "wall_seconds":
            raise BadRequest(f"grant: unknown dimension {dim!r}")
        try:
            out[dim] = check_limit(f"grant.{dim}", dim, amount)
        except ConfigError as exc:
            raise BadRequest(str(exc)) from None
    return out
