"""Who a request is (its tenant) and which conversation it continues: the store keys.

* The **tenant**: the value of the header the operator trusts (``tenant_header``), or
  else the first 16 hex digits of the SHA-256 of the request's API key
  (``Authorization: Bearer ...`` or ``x-api-key``), so a key never reaches the store,
  a log or a span; ``anonymous`` without one.
* The **conversation**, the first that applies: the ``x-budgetmix-conversation`` header;
  the Responses ``conversation`` (an id, or ``{"id": ...}``); the Responses
  ``previous_response_id``, looked up among the responses this tenant was answered (in
  the store, so any gateway process finds it); else the tenant's ``default``
  conversation (``unattributed="share"``) or a 400 (``"refuse"``).

Every key is the tenant's: one tenant can neither charge nor read another's budget, nor
continue another's response chain.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from typing import Any

from budgetmix.stores import LedgerStore

__all__ = [
    "RESPONSE_TTL",
    "BadRequest",
    "conversation_key",
    "conversation_of",
    "response_link",
    "tenant_key",
    "tenant_of",
]

CONVERSATION_HEADER = "x-budgetmix-conversation"
MAX_NAME = 256
#: How long a response id names its conversation (seconds).
RESPONSE_TTL = 7 * 86_400


class BadRequest(ValueError):
    """A request the gateway refuses before anything is charged (status 400)."""


def _name(field: str, value: str) -> str:
    if not 0 < len(value) <= MAX_NAME or not value.isprintable() or not value.isascii():
        raise BadRequest(f"{field}: expected 1 to {MAX_NAME} printable ASCII characters")
    return value


def credential(headers: Mapping[str, str]) -> str | None:
    """The API key a request carries, if any (never logged)."""
    auth = headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip() or None
    return headers.get("x-api-key") or None


def tenant_of(headers: Mapping[str, str], trusted_header: str | None) -> str:
    """The request's tenant (see the module)."""
    if trusted_header is not None:
        value = headers.get(trusted_header)
        if value is None:
            raise BadRequest(f"{trusted_header}: the header naming the tenant is missing")
        return "h." + _name(trusted_header, value)
    key = credential(headers)
    if key is None:
        return "anonymous"
    return "k." + hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def response_link(tenant: str, response_id: str) -> str:
    """The store name under which a tenant's response id names its conversation."""
    return f"r:{tenant}:{response_id}"


def conversation_of(
    headers: Mapping[str, str], body: Mapping[str, Any], tenant: str, store: LedgerStore
) -> str | None:
    """The conversation the request continues (``None``: it names none)."""
    header = headers.get(CONVERSATION_HEADER)
    if header is not None:
        return _name(CONVERSATION_HEADER, header)
    conv = body.get("conversation")
    if isinstance(conv, dict):
        conv = conv.get("id")
    if conv is not None:
        if not isinstance(conv, str):
            raise BadRequest("conversation: expected an id or {\"id\": ...}")
        return _name("conversation", conv)
    prev = body.get("previous_response_id")
    if prev is not None:
        if not isinstance(prev, str):
            raise BadRequest("previous_response_id: expected a string")
        found = store.lookup(response_link(tenant, _name("previous_response_id", prev)))
        if found is not None:
            return found
        return prev  # a chain this gateway has not seen start: the id names it
    return None


def conversation_key(tenant: str, conversation: str) -> str:
    """The store key of a tenant's conversation."""
    return f"c:{tenant}:{conversation}"


def tenant_key(tenant: str, window_seconds: int, now: float | None = None) -> str:
    """The store key of a tenant's budget in the window ``now`` falls in (UTC)."""
    window = int((time.time() if now is None else now) // window_seconds)
    return f"t:{tenant}:{window_seconds}:{window}"
