"""Who a budgeted request goes to: ``gen_ai.provider.name``, ``server.address`` and
``server.port`` of its turn, from the wrapped client's base URL or the request's URL.

The provider is read from well-known hosts; any other host (a compatible server such as
vLLM or Ollama, a proxy) is named by the wire format it speaks: ``anthropic`` for the
Messages API, ``openai`` for Chat Completions and Responses, as the GenAI conventions
name those APIs' providers.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from budgetmix.steps import Turn

__all__ = ["describe_turn", "provider_of"]

_HOSTS = {
    "api.openai.com": "openai",
    "api.anthropic.com": "anthropic",
    "generativelanguage.googleapis.com": "gcp.gemini",
    "api.deepseek.com": "deepseek",
    "api.groq.com": "groq",
    "api.mistral.ai": "mistral_ai",
    "api.x.ai": "x_ai",
    "api.perplexity.ai": "perplexity",
}
_SUFFIXES = (
    (".openai.azure.com", "azure.ai.openai"),
    (".services.ai.azure.com", "azure.ai.inference"),
    ("aiplatform.googleapis.com", "gcp.vertex_ai"),
    (".amazonaws.com", "aws.bedrock"),
)
_DEFAULT_PORTS = {"http": 80, "https": 443}


def provider_of(kind: str, host: str | None) -> str:
    """The ``gen_ai.provider.name`` of a request of wire ``kind`` to ``host``."""
    if host:
        known = _HOSTS.get(host.lower())
        if known is not None:
            return known
        for suffix, provider in _SUFFIXES:
            if host.lower().endswith(suffix):
                return provider
    return "anthropic" if kind == "anthropic" else "openai"


@lru_cache(maxsize=256)
def _address(url: str) -> tuple[str | None, int | None]:
    """The host and port of ``url``; the scheme's port when none is written."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:  # an unreadable URL: no address
        return None, None
    if port is None:
        port = _DEFAULT_PORTS.get(parts.scheme)
    return host or None, port


def describe_turn(turn: Turn, kind: str, url: Any) -> None:
    """Tell ``turn`` its provider and server (from ``url``)."""
    host, port = _address(str(url)) if url is not None else (None, None)
    turn.describe(provider=provider_of(kind, host), server_address=host, server_port=port)
