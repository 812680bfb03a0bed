"""A scripted, OpenAI- and Anthropic-compatible fake LLM server on 127.0.0.1.

For tests, examples and benchmarks that must never reach a real model.
Script replies in order (``Reply``), or give a ``default`` reply or function;
each request is answered in the wire format of the endpoint it hit, whole or
as server-sent events when the request says ``"stream": true``:

* ``POST .../chat/completions`` - OpenAI Chat Completions
* ``POST .../responses`` - OpenAI Responses
* ``POST .../messages`` - Anthropic Messages

Usage::

    with FakeLLMServer([Reply.call("add", {"a": 1, "b": 2}), Reply.say("3")]) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="test")
        ...
        server.requests[-1].json["messages"]   # what the model was sent

``server.transport()`` answers the same way in-process (no socket; for
``httpx`` and ``httpx2`` clients, sync and async). Faults are replies too: ``Reply.error(429)``,
``Reply(disconnect=True)`` (connection dropped), ``Reply(usage=False)``,
``Reply(empty=True)``, ``Reply(body=b"...")`` (raw bytes), ``Reply(cut=True)`` (half the
body, then the connection dropped).
"""

from __future__ import annotations

import json
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from budgetmix.adapters.testing._fake_wire import (
    RecordedRequest,
    Reply,
    _kind,
    _Rendered,
    _Renderer,
)

__all__ = ["FakeLLMServer", "FakeTransport", "RecordedRequest", "Reply"]


_DONE = Reply(text="done")


class FakeLLMServer:
    """Scripted fake LLM endpoints, served on a loopback port or in-process.

    Args:
        replies: answers, one per request, in order.
        default: the answer once the script is empty: a :class:`Reply`, a function of the
            :class:`RecordedRequest`, or ``None`` to answer 500 (script exhausted).
        model: the model name reported (default: the request's ``model``).
    """

    def __init__(
        self,
        replies: Iterable[Reply] = (),
        *,
        default: Reply | Callable[[RecordedRequest], Reply] | None = _DONE,
        model: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.default = default
        self.model = model
        self.requests: list[RecordedRequest] = []
        self._script: deque[Reply] = deque(replies)
        self._lock = threading.Lock()
        self._addr = (host, port)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- scripting -------------------------------------------------------------------
    def push(self, *replies: Reply) -> None:
        """Append replies to the script."""
        with self._lock:
            self._script.extend(replies)

    def model_requests(self) -> list[RecordedRequest]:
        """The requests that hit a model endpoint (not health checks and the like)."""
        return [r for r in self.requests if _kind(r.path) is not None]

    def _next(self, request: RecordedRequest) -> Reply | None:
        with self._lock:
            self.requests.append(request)
            if self._script:
                return self._script.popleft()
        return self.default(request) if callable(self.default) else self.default

    def handle(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> _Rendered:
        """Answer one request (the server and the mock transport both call this)."""
        kind = _kind(path)
        recorded = RecordedRequest(method, path, {k.lower(): v for k, v in headers.items()}, body)
        if kind is None or method.upper() != "POST":
            self.requests.append(recorded)
            return _Rendered(
                404, {"content-type": "application/json"}, [b'{"error": {"message": "not found"}}']
            )
        reply = self._next(recorded)
        if reply is None:
            reply = Reply.error(500, "fake server: script exhausted")
        request = recorded.json
        model = (
            self.model
            or (request.get("model") if isinstance(request, dict) else None)
            or "fake-model"
        )
        r = _Renderer(kind, reply, request, str(model), len(self.requests))
        headers_out = {"content-type": "application/json", **dict(reply.headers)}
        if reply.disconnect:
            return _Rendered(0, {}, [], disconnect=True)
        if reply.body is not None:
            return _Rendered(reply.status, headers_out, [reply.body], cut=reply.cut)
        if not 200 <= reply.status < 300:
            error = json.dumps(r.error_body()).encode()
            return _Rendered(reply.status, headers_out, [error], cut=reply.cut)
        if isinstance(request, dict) and request.get("stream"):
            stream = {
                "chat": r.chat_stream,
                "responses": r.responses_stream,
                "anthropic": r.anthropic_stream,
            }[kind]
            sse_headers = {**dict(reply.headers), "content-type": "text/event-stream"}
            return _Rendered(reply.status, sse_headers, list(stream()), stream=True)
        whole = {"chat": r.chat, "responses": r.responses, "anthropic": r.anthropic}[kind]()
        return _Rendered(reply.status, headers_out, [json.dumps(whole).encode()], cut=reply.cut)

    # -- in-process transport --------------------------------------------------------
    def transport(self) -> FakeTransport:
        """An in-process transport answering like the server, without a socket, for
        ``httpx`` and ``httpx2`` clients, sync and async (``Client(transport=...)``)."""
        return FakeTransport(self)

    # -- loopback server -------------------------------------------------------------
    def start(self) -> FakeLLMServer:
        """Start serving on the loopback port (idempotent)."""
        if self._server is None:
            self._server = _QuietServer(self._addr, _make_handler(self))
            self._server.daemon_threads = True
            self._thread = threading.Thread(
                target=self._server.serve_forever, name="fake-llm", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving (idempotent)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def root_url(self) -> str:
        """``http://127.0.0.1:PORT`` (Anthropic SDK ``base_url``)."""
        if self._server is None:
            raise RuntimeError("FakeLLMServer is not started; use `with FakeLLMServer() as s:`")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1`` (OpenAI SDK ``base_url``)."""
        return self.root_url + "/v1"


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # clients hanging up (keep-alive connections closed at exit) are not errors here
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FakeTransport:
    """Answers requests in-process from a :class:`FakeLLMServer` script (duck-typed
    ``BaseTransport`` / ``AsyncBaseTransport`` of ``httpx`` and ``httpx2``)."""

    def __init__(self, fake: FakeLLMServer) -> None:
        self.fake = fake

    def _answer(self, request: Any, body: bytes) -> Any:
        lib = sys.modules[type(request).__module__.split(".", 1)[0]]
        out = self.fake.handle(
            request.method, request.url.raw_path.decode(), dict(request.headers), body
        )
        if out.disconnect:
            raise lib.RemoteProtocolError(
                "Server disconnected without sending a response.", request=request
            )
        content = b"".join(out.chunks)
        if out.cut:
            headers = {**out.headers, "content-length": str(len(content))}
            stream = _cut_stream(lib, content[: len(content) // 2], request)
            return lib.Response(out.status, headers=headers, stream=stream, request=request)
        return lib.Response(out.status, headers=out.headers, content=content, request=request)

    def handle_request(self, request: Any) -> Any:
        """Answer one request from the script (httpx transport interface)."""
        return self._answer(request, request.read())

    async def handle_async_request(self, request: Any) -> Any:
        """Answer one request from the script, awaited."""
        return self._answer(request, await request.aread())

    def close(self) -> None:
        """Nothing to close: the transport holds no connection."""
        pass

    async def aclose(self) -> None:
        """Nothing to close: the transport holds no connection."""
        pass

    def __enter__(self) -> FakeTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    async def __aenter__(self) -> FakeTransport:
        return self

    async def __aexit__(self, *exc: object) -> None:
        pass


def _cut_stream(lib: Any, head: bytes, request: Any) -> Any:
    """A body stream of ``lib`` that yields ``head`` and then fails as a dropped
    connection does (sync and async)."""
    message = "peer closed connection without sending complete message body"

    class Cut(lib.SyncByteStream, lib.AsyncByteStream):  # type: ignore[misc]
        def __iter__(self) -> Any:
            yield head
            raise lib.RemoteProtocolError(message, request=request)

        async def __aiter__(self) -> Any:
            yield head
            raise lib.RemoteProtocolError(message, request=request)

    return Cut()


def _make_handler(fake: FakeLLMServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # headers and body go out as separate writes: with Nagle on, the body waits
        # for the client's delayed ACK (~40 ms a request on Linux)
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output clean

        def _serve(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else b""
            out = fake.handle(self.command, self.path, dict(self.headers.items()), body)
            if out.disconnect:
                self.close_connection = True
                return
            self.send_response(out.status)
            for key, value in out.headers.items():
                self.send_header(key, value)
            if out.stream:
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                for chunk in out.chunks:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
            else:
                payload = b"".join(out.chunks)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                if out.cut:  # half of what the header promised, then hang up
                    self.wfile.write(payload[: len(payload) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(payload)

        do_POST = _serve
        do_GET = _serve

    return Handler
