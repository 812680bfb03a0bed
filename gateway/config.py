"""The gateway's configuration: one TOML (or JSON) file, then flags over it.

::

    upstream = "https://api.openai.com"          # where /v1/chat/completions, /v1/responses go
    anthropic_upstream = "https://api.anthropic.com"   # /v1/messages (default: upstream)
    store = "sqlite:///var/lib/budgetmix/gateway.db"   # or redis://host:6379/0, memory://
    on_exhausted = "respond"       # or "error" (a 429 in the wire's error format)
    fail_open = false              # the store down: refuse (default) or forward unbudgeted
    admin_token_env = "BUDGETMIX_ADMIN_TOKEN"   # the admin API's token (never in the file)

    [conversation]                 # per conversation (x-budgetmix-conversation, ...)
    turns = 20
    cost_usd = 1.0

    [tenant]                       # per tenant (API-key hash, or a trusted header)
    total_tokens = 2_000_000
    window_seconds = 86400         # a fresh budget every day (UTC)
    header = "x-team"              # optional: trust this header to name the tenant
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from budgetmix import Budget, ConfigError
from budgetmix._validate import (
    MAX_COUNT,
    check_bool,
    check_choice,
    check_int,
    check_keys,
    check_mapping,
    check_number,
    check_str,
)
from budgetmix.notice import NOTICE_FORMATS

__all__ = ["GatewayConfig", "load_config"]

OnExhausted = Literal["respond", "error"]
_TOP = (
    "upstream", "anthropic_upstream", "store", "on_exhausted", "fail_open", "admin_token_env",
    "notice_format", "unattributed", "max_header_bytes", "max_body_bytes", "timeout_seconds",
    "host", "port", "conversation", "tenant",
)  # fmt: skip
_TENANT_EXTRA = ("window_seconds", "header")


@dataclass(frozen=True, kw_only=True)
class GatewayConfig:
    """Everything ``budgetmix gateway`` runs with (see the module for the file).

    Attributes:
        upstream: base URL the OpenAI wires are forwarded to (the path is kept).
        anthropic_upstream: base URL for ``/v1/messages`` (default: ``upstream``).
        store: the :func:`~budgetmix.stores.open_store` URL of the ledgers.
        conversation: the budget of each conversation.
        tenant: the budget of each tenant per window (``None``: none).
        tenant_window_seconds: the tenant budget's window (a fresh one at each boundary).
        tenant_header: a header the operator trusts to name the tenant (``None``: a hash
            of the request's API key).
        on_exhausted: ``"respond"`` (a final assistant message in the wire's format) or
            ``"error"`` (status 429 with the wire's error body).
        fail_open: the store failing, forward requests unbudgeted (logged) instead of
            refusing them with 503.
        admin_token: the admin API's bearer token (``None``: no admin API).
        notice_format: the notice's format (``NOTICE_FORMATS``).
        unattributed: a request naming no conversation: ``"share"`` the tenant's
            ``default`` conversation or ``"refuse"`` it (400).
        max_header_bytes, max_body_bytes: the largest request headers and body (431, 413).
        timeout_seconds: the upstream's read timeout.
    """

    upstream: str = "https://api.openai.com"
    anthropic_upstream: str | None = None
    store: str = "sqlite://budgetmix-gateway.db"
    conversation: Budget = field(default_factory=lambda: Budget(turns=50))
    tenant: Budget | None = None
    tenant_window_seconds: int = 86_400
    tenant_header: str | None = None
    on_exhausted: OnExhausted = "respond"
    fail_open: bool = False
    admin_token: str | None = None
    notice_format: str = "v1"
    unattributed: Literal["share", "refuse"] = "share"
    max_header_bytes: int = 16_384
    max_body_bytes: int = 8 * 2**20
    timeout_seconds: float = 600.0
    host: str = "127.0.0.1"
    port: int = 4000

    def __post_init__(self) -> None:
        for name in ("upstream", "anthropic_upstream"):
            url = getattr(self, name)
            if url is not None and not check_str(name, url).startswith(("http://", "https://")):
                raise ConfigError(f"{name}: expected an http:// or https:// URL, got {url!r}")
        check_str("store", self.store, empty=False)
        check_choice("on_exhausted", self.on_exhausted, ("respond", "error"))
        check_choice("unattributed", self.unattributed, ("share", "refuse"))
        check_choice("notice_format", self.notice_format, NOTICE_FORMATS)
        check_bool("fail_open", self.fail_open)
        check_int("tenant.window_seconds", self.tenant_window_seconds, minimum=1)
        check_int("max_header_bytes", self.max_header_bytes, minimum=1024)
        check_int("max_body_bytes", self.max_body_bytes, minimum=1024)
        check_number("timeout_seconds", self.timeout_seconds, positive=True)
        check_int("port", self.port, minimum=0, maximum=65535)
        if self.tenant_header is not None:
            check_str("tenant.header", self.tenant_header, empty=False)
            object.__setattr__(self, "tenant_header", self.tenant_header.lower())
        if self.admin_token is not None and len(self.admin_token) < 16:
            raise ConfigError("admin_token: at least 16 characters")

    @property
    def messages_upstream(self) -> str:
        """Where ``/v1/messages`` goes."""
        return self.anthropic_upstream or self.upstream


def _budget(
    field_name: str, table: Any, extra: tuple[str, ...] = ()
) -> tuple[Budget, dict[str, Any]]:
    data = check_mapping(field_name, table)
    rest = {k: data.pop(k) for k in extra if k in data}
    if extra:  # a tenant's budget may limit tokens or cost alone
        data.setdefault("turns", MAX_COUNT)
    try:
        return Budget.from_dict(data), rest
    except ConfigError as exc:
        raise ConfigError(f"{field_name}: {exc}") from None


def _read_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"config: cannot read {path}: {exc.strerror}") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        what = "JSON" if path.suffix == ".json" else "TOML"
        raise ConfigError(f"config: {path} is not valid {what}: {exc}") from None
    return check_mapping("config", data)


def load_config(
    path: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> GatewayConfig:
    """The config of ``path`` (TOML, or JSON for ``.json``) with ``overrides`` (flag
    values, ``None`` ones skipped) over it; the admin token is read from the variable
    ``admin_token_env`` names (default ``BUDGETMIX_ADMIN_TOKEN``) in ``environ``.

    Raises:
        ConfigError: an unreadable file, an unknown key or a bad value; the message
            names the field (``conversation.turns``, ``tenant.window_seconds``).
    """
    data = _read_file(Path(path)) if path is not None else {}
    data.update({k: v for k, v in (overrides or {}).items() if v is not None})
    check_keys("config", data, _TOP)
    env = os.environ if environ is None else environ
    kwargs: dict[str, Any] = {}
    if "conversation" in data:
        kwargs["conversation"] = _budget("conversation", data.pop("conversation"))[0]
    if "tenant" in data:
        budget, rest = _budget("tenant", data.pop("tenant"), _TENANT_EXTRA)
        kwargs["tenant"] = budget
        if "window_seconds" in rest:
            kwargs["tenant_window_seconds"] = rest["window_seconds"]
        if "header" in rest:
            kwargs["tenant_header"] = rest["header"]
    token_env = check_str("admin_token_env", data.pop("admin_token_env", "BUDGETMIX_ADMIN_TOKEN"))
    token = env.get(token_env)
    if token:
        kwargs["admin_token"] = token
    return replace(GatewayConfig(), **data, **kwargs)
