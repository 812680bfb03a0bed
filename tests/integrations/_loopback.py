"""Loopback only, for the framework scripts run in their own virtualenvs
(``_adk_agent.py``, ``_sk_agent.py``, ``_crewai_crew.py``): importing this module makes
every IPv4/IPv6 ``connect`` to anything but 127.0.0.1 or ::1 fail with ``OSError`` and
records the address in :data:`REFUSED`, which each script prints, so a test can assert
that the framework tried to reach nothing else. Import it before the framework."""

from __future__ import annotations

import socket
from typing import Any

REFUSED: list[str] = []
_connect = socket.socket.connect


def _loopback_only(self: socket.socket, address: Any) -> None:
    host = address[0] if isinstance(address, tuple) else str(address)
    if self.family in (socket.AF_INET, socket.AF_INET6) and host not in ("127.0.0.1", "::1"):
        REFUSED.append(str(host))
        raise OSError(f"network blocked: {host}")
    _connect(self, address)


socket.socket.connect = _loopback_only  # type: ignore[method-assign]
