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
``Reply(empty=True)``, ``Reply(body=b"...")`` (raw bytes).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

__all__ = ["FakeLLMServer", "FakeToolCall", "FakeTransport", "RecordedRequest", "Reply"]


@dataclass(frozen=True, slots=True, kw_only=True)
class FakeToolCall:
    """A tool call the fake model makes; ``arguments`` as JSON text (may be broken on purpose)."""

    name: str
    arguments: str = "{}"
    id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Reply:
    """One scripted answer.

    Attributes:
        text: assistant text.
        tool_calls: tool calls to make.
        finish_reason: ``stop``, ``tool_calls`` or ``length`` (default from the content);
            rendered in each wire's own words (``end_turn``, ``max_tokens``, ...).
        input_tokens, output_tokens: reported usage (default: request bytes / 4, output / 4).
        cached_tokens: of the input, served from the prompt cache (reported in each wire's
            own shape: inside ``prompt_tokens``/``input_tokens`` for OpenAI, beside
            ``input_tokens`` as ``cache_read_input_tokens`` for Anthropic).
        cache_write_tokens: of the input, written to the cache (Anthropic's
            ``cache_creation_input_tokens``).
        usage: report usage at all.
        empty: no choices / output items / content blocks.
        status: HTTP status; not 2xx renders the provider's error body.
        headers: extra response headers (``retry-after``).
        body: raw response bytes instead of a rendered body.
        disconnect: drop the connection without answering.
    """

    text: str = ""
    tool_calls: tuple[FakeToolCall, ...] = ()
    finish_reason: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    usage: bool = True
    empty: bool = False
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes | None = None
    disconnect: bool = False

    @classmethod
    def say(cls, text: str, **kw: Any) -> Reply:
        """A plain text answer."""
        return cls(text=text, **kw)

    @classmethod
    def call(cls, name: str, arguments: Mapping[str, Any] | str | None = None, **kw: Any) -> Reply:
        """One tool call; ``arguments`` a mapping (dumped to JSON) or raw JSON text."""
        args = arguments if isinstance(arguments, str) else json.dumps(dict(arguments or {}))
        return cls(tool_calls=(FakeToolCall(name=name, arguments=args),), **kw)

    @classmethod
    def error(
        cls, status: int, message: str = "fake error", *, retry_after: float | None = None
    ) -> Reply:
        """An error response with the provider's error body."""
        headers = {"retry-after": str(retry_after)} if retry_after is not None else {}
        return cls(status=status, text=message, headers=headers)


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """A request the fake server received."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        """The body parsed as JSON (``None`` when it is not JSON)."""
        try:
            return json.loads(self.body)
        except ValueError:
            return None


@dataclass(frozen=True, slots=True)
class _Rendered:
    status: int
    headers: dict[str, str]
    chunks: list[bytes]
    stream: bool = False
    disconnect: bool = False


def _kind(path: str) -> str | None:
    path = path.split("?", 1)[0].rstrip("/")
    for suffix, kind in (
        ("/chat/completions", "chat"),
        ("/responses", "responses"),
        ("/messages", "anthropic"),
    ):
        if path.endswith(suffix):
            return kind
    return None


def _sse(event: str | None, data: Any) -> bytes:
    head = f"event: {event}\n" if event else ""
    payload = data if isinstance(data, str) else json.dumps(data)
    return f"{head}data: {payload}\n\n".encode()


def _halves(text: str) -> list[str]:
    mid = len(text) // 2
    return [p for p in (text[:mid], text[mid:]) if p]


class _Renderer:
    """Renders one reply for one request in one wire format."""

    _FINISH: ClassVar[dict[str, dict[str, str]]] = {
        "chat": {"stop": "stop", "tool_calls": "tool_calls", "length": "length"},
        "anthropic": {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"},
    }

    def __init__(self, kind: str, reply: Reply, request: Any, model: str, seq: int) -> None:
        self.kind, self.reply, self.model, self.seq = kind, reply, model, seq
        self.request = request if isinstance(request, dict) else {}
        self.created = int(time.time())
        body_len = len(json.dumps(self.request))
        out_len = len(reply.text) + sum(len(t.arguments) for t in reply.tool_calls)
        self.inp = reply.input_tokens if reply.input_tokens is not None else max(1, body_len // 4)
        self.out = reply.output_tokens if reply.output_tokens is not None else max(1, out_len // 4)
        self.calls = [
            (tc.id or f"call_{seq}_{i}", tc.name, tc.arguments)
            for i, tc in enumerate(reply.tool_calls)
        ]

    def finish(self) -> str:
        neutral = self.reply.finish_reason or ("tool_calls" if self.calls else "stop")
        return self._FINISH.get(self.kind, {}).get(neutral, neutral)

    # -- chat completions ------------------------------------------------------------
    def chat(self) -> dict[str, Any]:
        r = self.reply
        message: dict[str, Any] = {"role": "assistant", "content": r.text or None, "refusal": None}
        if self.calls:
            message["tool_calls"] = [
                {"id": cid, "type": "function", "function": {"name": n, "arguments": a}}
                for cid, n, a in self.calls
            ]
        body: dict[str, Any] = {
            "id": f"chatcmpl-{self.seq}",
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": []
            if r.empty
            else [
                {"index": 0, "message": message, "finish_reason": self.finish(), "logprobs": None}
            ],
        }
        if r.usage:
            body["usage"] = self._chat_usage()
        return body

    def _chat_usage(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.inp,
            "completion_tokens": self.out,
            "total_tokens": self.inp + self.out,
            "prompt_tokens_details": {"cached_tokens": self.reply.cached_tokens},
        }

    def chat_stream(self) -> Iterator[bytes]:
        def chunk(choices: list[Any], **extra: Any) -> bytes:
            base = {
                "id": f"chatcmpl-{self.seq}",
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": choices,
            }
            return _sse(None, {**base, **extra})

        def delta(d: dict[str, Any], finish: str | None = None) -> bytes:
            return chunk([{"index": 0, "delta": d, "finish_reason": finish, "logprobs": None}])

        if not self.reply.empty:
            yield delta({"role": "assistant", "content": ""})
            for piece in _halves(self.reply.text):
                yield delta({"content": piece})
            for i, (cid, name, args) in enumerate(self.calls):
                first = {
                    "index": i,
                    "id": cid,
                    "type": "function",
                    "function": {"name": name, "arguments": ""},
                }
                yield delta({"tool_calls": [first]})
                for piece in _halves(args):
                    yield delta({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
            yield delta({}, self.finish())
        opts = self.request.get("stream_options") or {}
        if self.reply.usage and opts.get("include_usage"):
            yield chunk([], usage=self._chat_usage())
        yield _sse(None, "[DONE]")

    # -- responses -------------------------------------------------------------------
    def _responses_items(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        if self.reply.empty:
            return items
        if self.reply.text or not self.calls:
            items.append(
                {
                    "type": "message",
                    "id": f"msg_{self.seq}",
                    "status": "completed",
                    "role": "assistant",
                    "content": [
                        {"type": "output_text", "text": self.reply.text, "annotations": []}
                    ],
                }
            )
        for i, (cid, name, args) in enumerate(self.calls):
            items.append(
                {
                    "type": "function_call",
                    "id": f"fc_{self.seq}_{i}",
                    "call_id": cid,
                    "name": name,
                    "arguments": args,
                    "status": "completed",
                }
            )
        return items

    def responses(
        self, *, status: str | None = None, output: list[Any] | None = None
    ) -> dict[str, Any]:
        truncated = self.reply.finish_reason == "length"
        body: dict[str, Any] = {
            "id": f"resp_{self.seq}",
            "object": "response",
            "created_at": self.created,
            "status": status or ("incomplete" if truncated else "completed"),
            "incomplete_details": {"reason": "max_output_tokens"} if truncated else None,
            "model": self.model,
            "output": self._responses_items() if output is None else output,
            "parallel_tool_calls": True,
            "tool_choice": self.request.get("tool_choice", "auto"),
            "tools": self.request.get("tools", []),
            "error": None,
        }
        if self.reply.usage and status is None:
            body["usage"] = {
                "input_tokens": self.inp,
                "input_tokens_details": {"cached_tokens": self.reply.cached_tokens},
                "output_tokens": self.out,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": self.inp + self.out,
            }
        return body

    def responses_stream(self) -> Iterator[bytes]:
        seq = iter(range(10_000))

        def ev(kind: str, **data: Any) -> bytes:
            return _sse(kind, {"type": kind, "sequence_number": next(seq), **data})

        yield ev("response.created", response=self.responses(status="in_progress", output=[]))
        for idx, item in enumerate(self._responses_items()):
            if item["type"] == "message":
                text = item["content"][0]["text"]
                yield ev(
                    "response.output_item.added",
                    output_index=idx,
                    item={**item, "content": [], "status": "in_progress"},
                )
                part = {"type": "output_text", "text": "", "annotations": []}
                where = {"item_id": item["id"], "output_index": idx, "content_index": 0}
                yield ev("response.content_part.added", **where, part=part)
                for piece in _halves(text):
                    yield ev("response.output_text.delta", **where, delta=piece, logprobs=[])
                yield ev("response.output_text.done", **where, text=text, logprobs=[])
                yield ev("response.content_part.done", **where, part={**part, "text": text})
            else:
                yield ev(
                    "response.output_item.added",
                    output_index=idx,
                    item={**item, "arguments": "", "status": "in_progress"},
                )
                for piece in _halves(item["arguments"]):
                    yield ev(
                        "response.function_call_arguments.delta",
                        item_id=item["id"],
                        output_index=idx,
                        delta=piece,
                    )
                yield ev(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=idx,
                    arguments=item["arguments"],
                    name=item["name"],
                )
            yield ev("response.output_item.done", output_index=idx, item=item)
        final = self.responses()
        kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
        yield ev(kind, response=final)

    # -- anthropic messages ----------------------------------------------------------
    def _blocks(self) -> list[dict[str, Any]]:
        if self.reply.empty:
            return []
        blocks: list[dict[str, Any]] = []
        if self.reply.text:
            blocks.append({"type": "text", "text": self.reply.text})
        for cid, name, args in self.calls:
            try:
                parsed = json.loads(args)
            except ValueError:
                parsed = {}  # the wire carries an object; a broken one only shows when streamed
            blocks.append(
                {
                    "type": "tool_use",
                    "id": cid.replace("call_", "toolu_"),
                    "name": name,
                    "input": parsed,
                }
            )
        return blocks

    def anthropic(self, *, content: list[Any] | None = None, stop: bool = True) -> dict[str, Any]:
        body: dict[str, Any] = {
            "id": f"msg_{self.seq}",
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": self._blocks() if content is None else content,
            "stop_reason": self.finish() if stop else None,
            "stop_sequence": None,
        }
        if self.reply.usage:
            r = self.reply
            body["usage"] = {
                # Anthropic reports cache reads and writes beside the uncached input
                "input_tokens": max(0, self.inp - r.cached_tokens - r.cache_write_tokens),
                "cache_read_input_tokens": r.cached_tokens,
                "cache_creation_input_tokens": r.cache_write_tokens,
                "output_tokens": self.out if stop else 1,
            }
        return body

    def anthropic_stream(self) -> Iterator[bytes]:
        yield _sse(
            "message_start",
            {"type": "message_start", "message": self.anthropic(content=[], stop=False)},
        )
        if self.reply.text:
            start = {"type": "text", "text": ""}
            yield _sse(
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": start},
            )
            for piece in _halves(self.reply.text):
                delta = {"type": "text_delta", "text": piece}
                yield _sse(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": 0, "delta": delta},
                )
            yield _sse("content_block_stop", {"type": "content_block_stop", "index": 0})
        base = 1 if self.reply.text else 0
        for j, (cid, name, args) in enumerate(self.calls):
            i = base + j
            block = {
                "type": "tool_use",
                "id": cid.replace("call_", "toolu_"),
                "name": name,
                "input": {},
            }
            yield _sse(
                "content_block_start",
                {"type": "content_block_start", "index": i, "content_block": block},
            )
            for piece in _halves(args):
                delta = {"type": "input_json_delta", "partial_json": piece}
                yield _sse(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": i, "delta": delta},
                )
            yield _sse("content_block_stop", {"type": "content_block_stop", "index": i})
        message_delta: dict[str, Any] = {
            "type": "message_delta",
            "delta": {"stop_reason": self.finish(), "stop_sequence": None},
        }
        if self.reply.usage:
            message_delta["usage"] = {"output_tokens": self.out}
        yield _sse("message_delta", message_delta)
        yield _sse("message_stop", {"type": "message_stop"})

    # -- errors ----------------------------------------------------------------------
    def error_body(self) -> dict[str, Any]:
        message = self.reply.text or "fake error"
        if self.kind == "anthropic":
            kind = {429: "rate_limit_error", 529: "overloaded_error"}.get(
                self.reply.status, "api_error"
            )
            return {"type": "error", "error": {"type": kind, "message": message}}
        return {"error": {"message": message, "type": "fake_error", "param": None, "code": None}}


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
        default: Reply | Callable[[RecordedRequest], Reply] | None = Reply(text="done"),
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
            return _Rendered(reply.status, headers_out, [reply.body])
        if not 200 <= reply.status < 300:
            return _Rendered(reply.status, headers_out, [json.dumps(r.error_body()).encode()])
        if isinstance(request, dict) and request.get("stream"):
            stream = {
                "chat": r.chat_stream,
                "responses": r.responses_stream,
                "anthropic": r.anthropic_stream,
            }[kind]
            sse_headers = {**dict(reply.headers), "content-type": "text/event-stream"}
            return _Rendered(reply.status, sse_headers, list(stream()), stream=True)
        whole = {"chat": r.chat, "responses": r.responses, "anthropic": r.anthropic}[kind]()
        return _Rendered(reply.status, headers_out, [json.dumps(whole).encode()])

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
        return lib.Response(
            out.status, headers=out.headers, content=b"".join(out.chunks), request=request
        )

    def handle_request(self, request: Any) -> Any:
        return self._answer(request, request.read())

    async def handle_async_request(self, request: Any) -> Any:
        return self._answer(request, await request.aread())

    def close(self) -> None:
        pass

    async def aclose(self) -> None:
        pass

    def __enter__(self) -> FakeTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    async def __aenter__(self) -> FakeTransport:
        return self

    async def __aexit__(self, *exc: object) -> None:
        pass


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
                self.wfile.write(payload)

        do_POST = _serve
        do_GET = _serve

    return Handler
