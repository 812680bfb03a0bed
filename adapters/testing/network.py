"""A network guard for tests and demos: nothing may reach a non-loopback host.

:func:`block_network` makes every socket connection and name lookup that would leave
the machine fail with :class:`NetworkBlockedError`; loopback fake servers keep working.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import threading
from collections.abc import Iterator
from typing import Any

from budgetmix.exceptions import BudgetmixError

__all__ = ["NetworkBlockedError", "block_network"]


class NetworkBlockedError(BudgetmixError, ConnectionRefusedError):
    """Something tried to reach a non-loopback host while :func:`block_network` was active."""


def _is_loopback(address: Any) -> bool:
    if isinstance(address, str | bytes):
        return True  # a Unix socket path never leaves the machine
    if not (isinstance(address, tuple) and address):
        return False
    host = str(address[0])
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False  # a host name: resolving it may already reach the network


_guard_lock = threading.Lock()
_guard_depth = 0


@contextlib.contextmanager
def block_network() -> Iterator[None]:
    """Refuse every socket connection and name lookup that is not loopback, process-wide.

    Tests and demos wrap themselves in it so that nothing can silently reach a
    real model; loopback fake servers keep working. Re-entrant.

    Raises:
        NetworkBlockedError: (inside the block) a connection to a non-loopback
            address or a lookup of a non-local host name.
    """
    global _guard_depth
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex
    real_getaddrinfo = socket.getaddrinfo

    def connect(self: socket.socket, address: Any) -> None:
        if not _is_loopback(address):
            raise NetworkBlockedError(f"network access blocked: {address!r}")
        real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        if not _is_loopback(address):
            raise NetworkBlockedError(f"network access blocked: {address!r}")
        return real_connect_ex(self, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host is not None and not _is_loopback(
            (host.decode() if isinstance(host, bytes) else str(host), 0)
        ):
            raise NetworkBlockedError(f"name lookup blocked: {host!r}")
        return real_getaddrinfo(host, *args, **kwargs)

    with _guard_lock:
        _guard_depth += 1
        if _guard_depth == 1:
            socket.socket.connect = connect  # type: ignore[method-assign,assignment]
            socket.socket.connect_ex = connect_ex  # type: ignore[method-assign,assignment]
            socket.getaddrinfo = getaddrinfo
    try:
        yield
    finally:
        with _guard_lock:
            _guard_depth -= 1
            if _guard_depth == 0:
                socket.socket.connect = real_connect  # type: ignore[method-assign]
                socket.socket.connect_ex = real_connect_ex  # type: ignore[method-assign]
                socket.getaddrinfo = real_getaddrinfo
