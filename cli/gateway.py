"""``budgetmix gateway``: the budget proxy, one command on the embedded default store.

::

    budgetmix gateway --upstream https://api.openai.com --turns 20
    # then, in any client: base_url="http://127.0.0.1:4000/v1"

Flags go over the ``--config`` file (TOML or JSON; docs/gateway.md). Tracing follows
the ``OTEL_*`` variables, as every command's does.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Sequence
from typing import Any

from budgetmix.cli._errors import CliParser, UsageError, blame, run_command
from budgetmix.exceptions import ConfigError

__all__ = ["gateway_main", "parse_gateway_args"]

PROG = "budgetmix gateway"
_BUDGET_FLAGS = ("turns", "tool_calls", "total_tokens", "cost_usd")


def _parser() -> CliParser:
    p = CliParser(prog=PROG, description="Budget any OpenAI- or Anthropic-compatible client "
                  "through one proxy (point its base_url here).")  # fmt: skip
    p.add_argument("--config", default=None, help="TOML or JSON file (docs/gateway.md)")
    p.add_argument("--upstream", default=None, help="OpenAI-compatible base URL")
    p.add_argument("--anthropic-upstream", default=None, help="base URL for /v1/messages")
    p.add_argument(
        "--store",
        default=None,
        help="sqlite:///path.db (default ./budgetmix-gateway.db), redis://..., memory://",
    )
    p.add_argument("--host", default=None)
    p.add_argument("--port", type=int, default=None)
    p.add_argument("--turns", type=int, default=None, help="turns per conversation")
    p.add_argument("--tool-calls", type=int, default=None, help="tool calls per conversation")
    p.add_argument("--total-tokens", type=int, default=None, help="tokens per conversation")
    p.add_argument("--cost-usd", type=float, default=None, help="dollars per conversation")
    p.add_argument("--on-exhausted", choices=["respond", "error"], default=None)
    p.add_argument(
        "--fail-open",
        action="store_true",
        default=None,
        help="with the store down, forward unbudgeted (default: refuse, 503)",
    )
    p.add_argument(
        "--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"]
    )
    return p


def parse_gateway_args(argv: Sequence[str]) -> tuple[Any, str]:
    """The :class:`~budgetmix.gateway.GatewayConfig` and log level ``argv`` describe.

    Raises:
        UsageError: a bad value; the message names the flag (or the config's field).
    """
    from budgetmix.gateway.config import load_config

    args: argparse.Namespace = _parser().parse_args(list(argv))
    overrides: dict[str, Any] = {
        "upstream": args.upstream,
        "anthropic_upstream": args.anthropic_upstream,
        "store": args.store,
        "host": args.host,
        "port": args.port,
        "on_exhausted": args.on_exhausted,
        "fail_open": args.fail_open,
    }
    budget = {k: getattr(args, k) for k in _BUDGET_FLAGS if getattr(args, k) is not None}
    # the message names the field: conversation.turns is --turns, port is --port
    with blame("config" if args.config is None else args.config, ConfigError):
        if budget:
            base = load_config(args.config).conversation.to_dict()
            overrides["conversation"] = {**base, **budget}
        config = load_config(args.config, overrides)
    return config, args.log_level


def _run(argv: Sequence[str]) -> int:
    config, level = parse_gateway_args(argv)
    from budgetmix.gateway.server import serve
    from budgetmix.telemetry import configure_tracing

    logging.basicConfig(level=level.upper(), format="%(asctime)s %(name)s %(message)s")
    # spans only where OTEL_TRACES_EXPORTER asks for them (none: the no-op tracer)
    handle = configure_tracing() if os.environ.get("OTEL_TRACES_EXPORTER") else None
    try:
        print(f"budgetmix gateway on http://{config.host}:{config.port} -> {config.upstream} "
              f"(store {config.store})", flush=True)  # fmt: skip
        serve(config, log_level=level)
    finally:
        if handle is not None:
            handle.shutdown()
    return 0


def gateway_main(argv: Sequence[str]) -> int:
    """Run the gateway until interrupted; 2 after one stderr line naming a bad flag."""
    return run_command(PROG, lambda: _run(argv), errors=(UsageError,))
