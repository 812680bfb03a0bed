"""A loopback OTLP/HTTP receiver for tests and examples.

It accepts what an OTLP/HTTP protobuf exporter posts to ``/v1/traces`` (plain,
gzip or deflate), decodes the ``ExportTraceServiceRequest`` and keeps every span
as a plain dict shaped like a line of :func:`budgetmix.telemetry.read_jsonl_spans`,
plus every request's headers and bodies. ``/v1/metrics`` and ``/v1/logs`` are
accepted and kept undecoded so a full OTel set-up can point at it. Needs the
``otlp`` extra (``opentelemetry-proto``)::

    with OTLPReceiver() as receiver:
        handle = configure_tracing("otlp", endpoint=receiver.endpoint, set_global=False)
        ...
        handle.flush()
        spans = receiver.spans
"""

from __future__ import annotations

import gzip
import threading
import zlib
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import TYPE_CHECKING, Any

from budgetmix._deps import require
from budgetmix.exceptions import BudgetmixError

if TYPE_CHECKING:
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan

__all__ = ["OTLPReceiver", "ReceivedRequest", "decode_trace_request"]

_SIGNAL_PATHS = ("/v1/traces", "/v1/metrics", "/v1/logs")
_TRACE_SERVICE = "opentelemetry.proto.collector.trace.v1.trace_service_pb2"


@dataclass(frozen=True)
class ReceivedRequest:
    """One POST as received: ``headers`` have lower-case names; ``body`` is decompressed."""

    path: str
    headers: dict[str, str]
    raw_body: bytes
    body: bytes


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return _attrs(value.kvlist_value.values)
    return getattr(value, kind)


def _attrs(pairs: Any) -> dict[str, Any]:
    kvs: list[KeyValue] = list(pairs)
    return {kv.key: _value(kv.value) for kv in kvs}


def _span_dict(span: ProtoSpan, resource: dict[str, Any], scope: dict[str, Any]) -> dict[str, Any]:
    from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

    return {
        "name": span.name,
        "trace_id": span.trace_id.hex(),
        "span_id": span.span_id.hex(),
        "parent_span_id": span.parent_span_id.hex() or None,
        "kind": Span.SpanKind.Name(span.kind).removeprefix("SPAN_KIND_"),
        "start_ns": span.start_time_unix_nano,
        "end_ns": span.end_time_unix_nano,
        "status": {
            "code": Status.StatusCode.Name(span.status.code).removeprefix("STATUS_CODE_"),
            "description": span.status.message or None,
        },
        "attributes": _attrs(span.attributes),
        "events": [
            {"name": e.name, "time_ns": e.time_unix_nano, "attributes": _attrs(e.attributes)}
            for e in span.events
        ],
        "links": [
            {
                "trace_id": link.trace_id.hex(),
                "span_id": link.span_id.hex(),
                "attributes": _attrs(link.attributes),
            }
            for link in span.links
        ],
        "resource": resource,
        "scope": scope,
    }


def decode_trace_request(body: bytes) -> list[dict[str, Any]]:
    """Decode a serialized ``ExportTraceServiceRequest`` into span dicts.

    Raises:
        MissingExtraError: ``opentelemetry-proto`` is not installed.
        google.protobuf.message.DecodeError: ``body`` is not such a message.
    """
    require("opentelemetry-proto", "otlp", module=_TRACE_SERVICE)
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans: list[dict[str, Any]] = []
    for resource_spans in request.resource_spans:
        resource = _attrs(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            scope = {"name": scope_spans.scope.name, "version": scope_spans.scope.version or None}
            spans.extend(_span_dict(s, resource, scope) for s in scope_spans.spans)
    return spans


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    receiver: OTLPReceiver


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output clean."""

    def _reply(self, status: int, body: bytes = b"") -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        if path not in _SIGNAL_PATHS:
            self._reply(404)
            return
        if path == "/v1/metrics" and self.server.receiver.metrics_status != 200:
            self.server.receiver.refused += 1
            self._reply(self.server.receiver.metrics_status)  # a backend without metrics
            return
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        encoding = (self.headers.get("Content-Encoding") or "identity").lower()
        try:
            if encoding == "gzip":
                body = gzip.decompress(raw)
            elif encoding == "deflate":
                body = zlib.decompress(raw)
            else:
                body = raw
            spans = decode_trace_request(body) if path == "/v1/traces" else []
        except Exception:
            # A bad body is the sender's bug: answer 400 like a collector would.
            self._reply(400)
            return
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.server.receiver._record(ReceivedRequest(path, headers, raw, body), spans)
        # An empty body is a valid (empty) Export*ServiceResponse for every signal.
        self._reply(200)


class OTLPReceiver:
    """OTLP/HTTP receiver on ``host`` (loopback) and a free port, served from a thread.

    Use as a context manager, or call :meth:`start` and :meth:`stop`. With
    ``metrics_status`` (e.g. 405) it answers ``/v1/metrics`` with that status, as a
    backend without a metrics endpoint does, and counts the refusals in ``refused``.

    Raises:
        MissingExtraError: on construction, when ``opentelemetry-proto`` is missing.
    """

    def __init__(
        self, host: str = "127.0.0.1", port: int = 0, *, metrics_status: int = 200
    ) -> None:
        require("opentelemetry-proto", "otlp", module=_TRACE_SERVICE)
        self._host, self._port = host, port
        self.metrics_status = metrics_status
        self.refused = 0
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._cond = threading.Condition()
        self._spans: list[dict[str, Any]] = []
        self._requests: list[ReceivedRequest] = []

    def start(self) -> OTLPReceiver:
        """Bind and serve in a daemon thread; returns self. Raises OSError if binding fails."""
        if self._server is not None:
            return self
        server = _Server((self._host, self._port), _Handler)
        server.receiver = self
        self._server = server
        # A short poll interval keeps stop() fast (shutdown waits for the next poll).
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="budgetmix-otlp-receiver",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket; received data stays readable."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> OTLPReceiver:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def endpoint(self) -> str:
        """Base URL (``http://127.0.0.1:PORT``), as for ``OTEL_EXPORTER_OTLP_ENDPOINT``.

        Raises:
            BudgetmixError: the receiver is not started.
        """
        if self._server is None:
            raise BudgetmixError("OTLPReceiver is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def traces_endpoint(self) -> str:
        """Full traces URL, as for ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``."""
        return self.endpoint + "/v1/traces"

    @property
    def spans(self) -> list[dict[str, Any]]:
        """Every span received so far, in arrival order (a copy)."""
        with self._cond:
            return list(self._spans)

    @property
    def requests(self) -> list[ReceivedRequest]:
        """Every accepted request so far, in arrival order (a copy)."""
        with self._cond:
            return list(self._requests)

    def wait_for_spans(self, count: int, timeout_s: float = 10.0) -> bool:
        """Block until at least ``count`` spans arrived; False if ``timeout_s`` ran out."""
        with self._cond:
            return self._cond.wait_for(lambda: len(self._spans) >= count, timeout_s)

    def clear(self) -> None:
        """Forget everything received."""
        with self._cond:
            self._spans.clear()
            self._requests.clear()

    def _record(self, request: ReceivedRequest, spans: list[dict[str, Any]]) -> None:
        with self._cond:
            self._requests.append(request)
            self._spans.extend(spans)
            self._cond.notify_all()
