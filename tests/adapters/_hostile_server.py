"""A hostile HTTP server on the loopback: each request is answered by a scripted body,
whole or streamed, sent in pieces with pauses (a trickle), cut short, or never ended.

The server is real (a socket on ``127.0.0.1``), so what is measured is what a client's
sockets and read timeouts do. A test sets ``server.script`` to a :class:`Script` (or a
function of the request path giving one); every request gets it.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class Script:
    """What the server sends: ``pieces`` of the body, ``pause`` seconds before each
    but the first; ``length``: a Content-Length header (``None``: the body ends when the
    connection closes; ``"chunked"``: chunked encoding); ``cut``: close without
    sending the rest; ``hang``: stay silent after the pieces until the client leaves."""

    pieces: list[bytes]
    pause: float = 0.0
    content_type: str = "application/json"
    length: int | str | None = "auto"
    cut: bool = False
    hang: bool = False
    status: int = 200
    extra_headers: dict[str, str] = field(default_factory=dict)


class HostileServer:
    """A threaded loopback server; ``url`` is its base URL."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self._sock.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self.script: Script | Callable[[str], Script] = Script([b"{}"])
        self.requests = 0
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._accept = threading.Thread(target=self._serve, daemon=True)
        self._accept.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except (TimeoutError, OSError):
                continue
            worker = threading.Thread(target=self._answer, args=(conn,), daemon=True)
            self._threads.append(worker)
            worker.start()

    def _read_request(self, conn: socket.socket) -> str:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return ""
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        while len(rest) < length:
            chunk = conn.recv(65536)
            if not chunk:
                break
            rest += chunk
        return lines[0].split(" ")[1] if " " in lines[0] else ""

    def _answer(self, conn: socket.socket) -> None:
        conn.settimeout(60)
        try:
            path = self._read_request(conn)
            self.requests += 1
            script = self.script(path) if callable(self.script) else self.script
            self._send(conn, script)
        except OSError:
            pass  # the client left: what a cut-off does
        finally:
            conn.close()

    def _send(self, conn: socket.socket, script: Script) -> None:
        body = b"".join(script.pieces)
        headers = [f"HTTP/1.1 {script.status} OK", f"Content-Type: {script.content_type}"]
        headers.append("Connection: close")
        if script.length == "auto":
            headers.append(f"Content-Length: {len(body)}")
        elif script.length == "chunked":
            headers.append("Transfer-Encoding: chunked")
        elif isinstance(script.length, int):
            headers.append(f"Content-Length: {script.length}")
        headers += [f"{k}: {v}" for k, v in script.extra_headers.items()]
        conn.sendall(("\r\n".join(headers) + "\r\n\r\n").encode())
        chunked = script.length == "chunked"
        for i, piece in enumerate(script.pieces):
            if i and script.pause and self._stop.wait(script.pause):
                return
            wire = b"%x\r\n%s\r\n" % (len(piece), piece) if chunked and piece else piece
            conn.sendall(wire)
        if script.hang:
            conn.settimeout(0.5)
            while not self._stop.is_set():
                try:
                    if not conn.recv(1):
                        return
                except TimeoutError:
                    continue
        if chunked and not script.cut:
            conn.sendall(b"0\r\n\r\n")

    def close(self) -> None:
        self._stop.set()
        self._accept.join(timeout=5)
        self._sock.close()
        for worker in self._threads:
            worker.join(timeout=5)


@contextmanager
def hostile_server() -> Iterator[HostileServer]:
    server = HostileServer()
    try:
        yield server
    finally:
        server.close()


def trickle(body: bytes, pause: float, **kw: object) -> Script:
    """``body`` one byte at a time, ``pause`` seconds apart."""
    return Script([body[i : i + 1] for i in range(len(body))], pause=pause, **kw)  # type: ignore[arg-type]


class Clock:
    """Wall time of a block (``elapsed``), by the monotonic clock."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.elapsed = 0.0

    def stop(self) -> float:
        self.elapsed = time.monotonic() - self.start
        return self.elapsed
