"""A small MCP server for the integration tests, run as ``python _mcp_server.py LOG``
over stdio: each tool appends its name to LOG when it runs, so a test can tell which
calls reached the server."""

from __future__ import annotations

import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer

LOG = Path(sys.argv[1])
server = MCPServer("calc")


def _ran(name: str) -> None:
    with LOG.open("a") as log:
        log.write(name + "\n")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    _ran("add")
    return a + b


@server.tool()
def divide(a: float, b: float) -> float:
    """Divide a by b (fails on zero)."""
    _ran("divide")
    return a / b


if __name__ == "__main__":
    server.run("stdio")
