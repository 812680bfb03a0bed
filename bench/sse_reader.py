"""The transport's event-stream reader on one large event: the old reader against the new.

    .venv/bin/python bench/sse_reader.py [--sizes 1 5 20] [--old-max 5] [--chunk 4096]

One chat-completion chunk whose content is ``SIZE`` MB, delivered in ``--chunk``-byte
pieces (what a socket read hands over), goes through ``BudgetTransport`` to a plain
``httpx`` client that reads it raw; reported: seconds per size. The old reader (kept
here as it was: each chunk appended to one buffer, then the whole buffer scanned for
the end of an event) is quadratic in the size of one event, so by default it runs up
to ``--old-max`` MB only (about 95 s at 20 MB on the machine the issue was measured
on). The new one (:class:`budgetmix.adapters._sse.EventStreamDecoder`) scans each byte
once. Both fold the event into the turn, and each run checks the usage was read. The
limits are raised for the run (20 MB is over the default ``max_event_bytes``, 16 MiB).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator
from typing import Any
from unittest import mock

import httpx
from budgetmix import Budget, BudgetController
from budgetmix.adapters import _sse
from budgetmix.adapters.http import BudgetTransport


class _OldDecoder:
    """The reader before the fix: a buffer that grows by each chunk and is scanned whole."""

    def __init__(self, max_event_bytes: int, max_body_bytes: int) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        self._buf += chunk.replace(b"\r\n", b"\n")
        out: list[bytes] = []
        while b"\n\n" in self._buf:
            block, self._buf = self._buf.split(b"\n\n", 1)
            if block.startswith(b"data:") and b"\n" not in block:
                out.append(block[5:].lstrip())
            else:
                lines = block.split(b"\n")
                out.append(b"\n".join(x[5:].lstrip() for x in lines if x.startswith(b"data:")))
        return out


class _Chunks(httpx.SyncByteStream):
    def __init__(self, body: bytes, size: int) -> None:
        self._body, self._size = body, size

    def __iter__(self) -> Iterator[bytes]:
        body, size = self._body, self._size
        for i in range(0, len(body), size):
            yield body[i : i + size]


def _event(megabytes: int) -> bytes:
    chunk = {
        "id": "c",
        "object": "chat.completion.chunk",
        "model": "gpt-4o",
        "choices": [{"index": 0, "delta": {"content": "x" * (megabytes * 1_000_000)}}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 1},
    }
    return b"data: " + json.dumps(chunk).encode() + b"\n\ndata: [DONE]\n\n"


def run(body: bytes, chunk: int, *, old: bool) -> float:
    """Seconds to stream ``body`` through the transport and read it raw."""

    def handler(request: httpx.Request) -> httpx.Response:
        headers = {"content-type": "text/event-stream"}
        return httpx.Response(200, headers=headers, stream=_Chunks(body, chunk))

    controller = BudgetController(Budget(turns=5))
    limit = 2 * len(body)  # past the default 16 MiB per event, which a 20 MB event is
    transport = BudgetTransport(
        httpx.MockTransport(handler), controller, max_event_bytes=limit, max_body_bytes=limit
    )
    request: dict[str, Any] = {"model": "gpt-4o", "messages": [], "stream": True}
    decoder = _OldDecoder if old else _sse.EventStreamDecoder
    with (
        mock.patch("budgetmix.adapters._transport.EventStreamDecoder", decoder),
        controller.episode() as ep,
        httpx.Client(transport=transport) as http,
    ):
        start = time.perf_counter()
        url = "http://bench.test/v1/chat/completions"
        with http.stream("POST", url, json=request) as response:
            for _ in response.iter_raw():
                pass
        elapsed = time.perf_counter() - start
        assert ep.state.used["input_tokens"] == 7, "the event was not read"
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 5, 20], help="MB")
    parser.add_argument("--old-max", type=int, default=5, help="largest MB for the old reader")
    parser.add_argument("--chunk", type=int, default=4096, help="bytes per delivered piece")
    args = parser.parse_args()
    print(f"{'event':>8} {'old (s)':>10} {'new (s)':>10} {'old/new':>8}")
    for size in args.sizes:
        body = _event(size)
        new = run(body, args.chunk, old=False)
        old = run(body, args.chunk, old=True) if size <= args.old_max else None
        shown = f"{old:10.2f}" if old is not None else f"{'-':>10}"
        ratio = f"{old / new:8.0f}" if old is not None else f"{'-':>8}"
        print(f"{size:>6}MB {shown} {new:10.3f} {ratio}")


if __name__ == "__main__":
    main()
