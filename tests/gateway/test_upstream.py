"""The gateway's upstream pool (aiohttp's client under httpx's transport interface): a
stream reaches the client as it arrives, and an upstream that is down is a 502 in the
wire's own format, with nothing charged."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from _gateway import GatewayThread
from _servers import free_port
from budgetmix import Budget
from budgetmix.gateway import GatewayConfig
from budgetmix.gateway.app import upstream_transport
from budgetmix.gateway.scopes import conversation_key, tenant_of
from budgetmix.stores import MemoryStore

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
HEADERS = {"authorization": "Bearer sk-a", "x-budgetmix-conversation": "s"}


def _event(delta: dict[str, object], finish: str | None = None) -> bytes:
    chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
             "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


class HeldStream:
    """An upstream that sends the first event of a stream, then holds the rest until
    ``release`` is set (``finished`` once it has sent everything)."""

    def __init__(self) -> None:
        self.release, self.finished = threading.Event(), threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["content-length"]))
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                self._chunk(_event({"role": "assistant", "content": "first "}))
                outer.release.wait(60)  # only a gateway that buffers makes this time out
                self._chunk(_event({"content": "second"}) + _event({}, "stop"))
                self._chunk(b"data: [DONE]\n\n")
                self._chunk(b"")
                outer.finished.set()

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> HeldStream:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def held() -> Iterator[HeldStream]:
    with HeldStream() as upstream:
        yield upstream


def test_the_default_upstream_pool_is_aiohttps_under_httpx() -> None:
    from httpx_aiohttp import AiohttpTransport

    transport = upstream_transport(httpx.Limits(max_connections=7))
    inner = getattr(transport, "inner", None)
    assert isinstance(inner, AiohttpTransport)
    assert inner.limits.max_connections == 7


def test_a_stream_reaches_the_client_as_it_arrives(held: HeldStream) -> None:
    store = MemoryStore()
    config = GatewayConfig(upstream=held.url, conversation=Budget(turns=3))
    received: list[bytes] = []
    with GatewayThread(config, store=store) as gw, httpx.Client(timeout=120) as client:
        url = gw.url + "/v1/chat/completions"
        with client.stream("POST", url, json=BODY, headers=HEADERS) as response:
            assert response.status_code == 200
            for part in response.iter_raw():
                if not received:  # the first event, while the upstream still holds the rest
                    assert b"first " in part
                    assert not held.finished.is_set(), "the gateway waited for the whole body"
                    held.release.set()
                received.append(part)
    text = b"".join(received)
    assert b"second" in text and text.rstrip().endswith(b"data: [DONE]")
    record = store.read(conversation_key(tenant_of(HEADERS, None), "s"))
    assert record is not None and record.used["turns"] == 1


@pytest.mark.slow
def test_an_upstream_that_is_down_is_a_502_in_the_wires_format() -> None:
    store = MemoryStore()
    config = GatewayConfig(upstream=f"http://127.0.0.1:{free_port()}", conversation=Budget(turns=3))
    with GatewayThread(config, store=store) as gw:
        response = httpx.post(gw.url + "/v1/chat/completions", json={**BODY, "stream": False},
                              headers=HEADERS, timeout=120)  # fmt: skip
    assert response.status_code == 502
    error = response.json()["error"]
    assert error["code"] == "upstream_error" and error["message"].startswith(
        "upstream: ConnectError"
    ), error
    assert store.read(conversation_key(tenant_of(HEADERS, None), "s")) is not None
