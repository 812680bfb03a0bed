"""``budgetmix gateway``: an OpenAI- and Anthropic-compatible proxy that budgets any client.

Point any client's ``base_url`` at it: Chat Completions, Responses and Messages requests
are budgeted per conversation and per tenant in a :mod:`budgetmix.stores` store (SQLite
by default, Redis for a fleet), told their budget in the same notice, traced, and
forwarded upstream with the client's own credentials. :class:`Gateway` is the ASGI app,
:func:`load_config` reads its configuration, :func:`serve` runs it on uvicorn (the
``gateway`` extra). docs/gateway.md has the whole story.
"""

from __future__ import annotations

from budgetmix.gateway.app import Gateway
from budgetmix.gateway.config import GatewayConfig, load_config
from budgetmix.gateway.server import serve

__all__ = ["Gateway", "GatewayConfig", "load_config", "serve"]
