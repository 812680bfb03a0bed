"""The fake LLM's replies and how each is rendered in the providers' wire formats.

:class:`Reply` scripts one answer; :class:`_Renderer` turns it into an OpenAI
Chat Completions, OpenAI Responses or Anthropic Messages body, whole or as
server-sent events, with usage, finish reasons and errors in each wire's own
shape. :mod:`budgetmix.adapters.testing.fake_server` serves them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from budgetmix.adapters._wire import anthropic, chat
from budgetmix.adapters.base import ToolCallRequest

__all__ = ["RecordedRequest", "Reply"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Reply:
    """One scripted answer.

    Attributes:
        text: assistant text.
        tool_calls: tool calls to make (``arguments`` may be broken JSON on purpose; a
            call without an ``id`` gets one).
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
        cut: send the status and headers (``content-length`` of the whole body) and half
            the body, then drop the connection: a body cut short.
    """

    text: str = ""
    tool_calls: tuple[ToolCallRequest, ...] = ()
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
    cut: bool = False

    @classmethod
    def say(cls, text: str, **kw: Any) -> Reply:
        """A plain text answer."""
        return cls(text=text, **kw)

    @classmethod
    def call(cls, name: str, arguments: Mapping[str, Any] | str | None = None, **kw: Any) -> Reply:
        """One tool call; ``arguments`` a mapping (dumped to JSON) or raw JSON text."""
        args = arguments if isinstance(arguments, str) else json.dumps(dict(arguments or {}))
        return cls(tool_calls=(ToolCallRequest(name=name, arguments=args),), **kw)

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
    cut: bool = False


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

    #: neutral finish reason -> the wire's word: the first of the readers' tables
    _FINISH: ClassVar[dict[str, dict[str, str]]] = {
        kind: {neutral: word for word, neutral in reversed(table.items())}
        for kind, table in (("chat", chat.FINISH), ("anthropic", anthropic.FINISH))
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
