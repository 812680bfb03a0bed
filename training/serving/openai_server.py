"""A small OpenAI-compatible server for a local Hugging Face model: token ids as vLLM returns them.

For CPU machines and CI, where no vLLM runs: :class:`LocalOpenAIServer` serves
``POST /v1/chat/completions`` on 127.0.0.1 from a transformers causal LM. The
conversation is rendered by the model's own chat template
(:class:`~budgetmix.adapters.chat_template.ChatTemplate`, ``tools=`` passed),
generation stops on the same stop ids as training's sampler, and the reply's
tool calls are parsed with the template's tool-call format. Asked with vLLM's
request fields, it answers with vLLM's response fields:

* ``return_token_ids: true`` -> ``prompt_token_ids`` (top level) and
  ``choices[0].token_ids`` (the sampled ids, the stop id included);
* ``logprobs: true`` -> ``choices[0].logprobs.content[i].logprob`` per sampled id
  (``token`` is ``"token_id:<id>"`` with ``return_tokens_as_token_ids: true``).

Requests are batched continuously (:mod:`~budgetmix.training.serving.continuous`, as
vLLM's scheduler does): one forward pass per sampled id for every request running, and a
request that arrives meanwhile joins the running batch at the next id; from idle, the
first request waits ``batch_window_s`` for others. Each request samples with its
own temperature and, given a ``seed``, its own generator. A conversation's KV cache is
kept across requests (:class:`~budgetmix.training.serving.prefix_cache.PrefixCache`, on
the in-process sampler's cache rows): a request feeds only the ids past the longest
cached prefix, the cache holds at most ``max_cached_conversations`` conversations and
``max_cached_columns`` columns (least recently used evicted), and the ids are
those of reading every prompt whole (``prefix_cache=False`` does that). Sampling
is seeded: the server's generator by ``seed``, a request with its own ``seed``
by that. The last ``log_size`` completions are logged
(:attr:`LocalOpenAIServer.log`: the ids it was fed and returned; trimmed as each
request ends, :meth:`LocalOpenAIServer.drain_log` takes and clears it), which is
what tests compare training data with.

Weights: the server samples from the model object it was given, so a trainer
that serves its own policy object samples step k+1 from the weights step k
left. ``POST /reload_weights`` with ``{"path": DIR}`` (or
:meth:`LocalOpenAIServer.reload_weights`) loads a saved model directory
(safetensors, manifest checked) in place of the served weights.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from budgetmix.adapters.base import ToolSpec
from budgetmix.adapters.chat_template import ChatTemplate
from budgetmix.exceptions import ConfigError

__all__ = ["LocalOpenAIServer", "ServedCompletion"]


@dataclass(frozen=True, slots=True)
class ServedCompletion:
    """One completion the server made: the ids it was fed and the ids it sampled."""

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finish_reason: str
    weights_version: int


class _BadRequest(Exception):
    """A request the server refuses with status 400 (OpenAI's error body)."""


@dataclass(slots=True)
class _Job:
    """One chat completion waiting for the sampler."""

    prompt_ids: list[int]
    max_tokens: int
    temperature: float
    seed: int | None
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None


def _number(body: Mapping[str, Any], name: str, default: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _BadRequest(f"{name} must be a number, got {value!r}")
    return float(value)


def _tool_specs(tools: Any) -> list[ToolSpec]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise _BadRequest("tools must be a list")
    specs = []
    for t in tools:
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise _BadRequest(f"a tool must be {{'type': 'function', 'function': {{...}}}}: {t!r}")
        specs.append(
            ToolSpec(
                name=fn["name"],
                description=str(fn.get("description") or ""),
                parameters=fn.get("parameters") or {},
            )
        )
    return specs


class LocalOpenAIServer:
    """An OpenAI-compatible chat server on 127.0.0.1 for ``model`` (see the module docstring).

    Args:
        model, tokenizer: a transformers causal LM and its tokenizer (with a chat template).
        chat_template: a template text instead of the tokenizer's (a training variant).
        model_name: the model name it answers to and reports.
        seed: seeds the server's sampling generator.
        max_model_len: prompt + ``max_tokens`` above it is refused (400), as vLLM does.
        batch_window_s: how long the sampler waits for more requests to batch with the first.
        max_batch: most requests sampled at once (more wait for a row to free).
        prefix_cache: keep conversations' KV caches across requests.
        max_cached_conversations, max_cached_columns: the prefix cache's bounds.
        log_size: completions kept in :attr:`log` (the newest).

    Use it as a context manager (or :meth:`start` / :meth:`close`); :attr:`base_url`
    is what an ``openai.OpenAI(base_url=...)`` takes.

    Raises:
        ConfigError: the tokenizer has no chat template, or a limit below 1.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        chat_template: str | None = None,
        model_name: str = "local",
        seed: int = 0,
        max_model_len: int = 4096,
        batch_window_s: float = 0.002,
        max_batch: int = 64,
        prefix_cache: bool = True,
        max_cached_conversations: int = 256,
        max_cached_columns: int = 1 << 18,
        log_size: int = 1024,
    ) -> None:
        import torch
        from budgetmix.training.serving.prefix_cache import PrefixCache

        if max_model_len < 1 or max_batch < 1 or log_size < 0:
            raise ConfigError(
                "LocalOpenAIServer: max_model_len and max_batch must be >= 1, log_size >= 0"
            )
        self.cache = (
            PrefixCache(model, max_entries=max_cached_conversations, max_columns=max_cached_columns)
            if prefix_cache
            else None
        )
        self.log_size = log_size
        self.template = ChatTemplate.for_model(model, tokenizer, chat_template=chat_template)
        self.model = model
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.max_model_len = max_model_len
        self.batch_window_s = batch_window_s
        self.max_batch = max_batch
        self.generator = torch.Generator().manual_seed(seed)
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad) if pad is not None else self.template.stop_token_ids[0]
        self.weights_version = 0
        self.log: list[ServedCompletion] = []
        self._calls = 0
        self._lock = threading.Lock()  # the model and the log
        self._count_lock = threading.Lock()
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self._http: ThreadingHTTPServer | None = None
        self._threads: list[threading.Thread] = []

    # -- lifecycle ---------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1`` (started servers only).

        Raises:
            ConfigError: the server is not started.
        """
        if self._http is None:
            raise ConfigError("LocalOpenAIServer: not started (use it as a context manager)")
        return f"http://127.0.0.1:{self._http.server_address[1]}/v1"

    def start(self) -> LocalOpenAIServer:
        """Bind a free port on 127.0.0.1 and serve in background threads."""
        handler = type("_Handler", (_Handler,), {"app": self})
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._http.daemon_threads = True
        self._threads = [
            threading.Thread(target=self._http.serve_forever, daemon=True),
            threading.Thread(target=self._sample_forever, daemon=True),
        ]
        for t in self._threads:
            t.start()
        return self

    def close(self) -> None:
        """Stop serving and join the threads."""
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
        self._jobs.put(None)
        for t in self._threads:
            t.join(timeout=10)
        self._http, self._threads = None, []

    def __enter__(self) -> LocalOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- weights -----------------------------------------------------------------------
    def reload_weights(self, path: str | Path) -> int:
        """Load the weights saved in the model directory ``path`` into the served model;
        returns the new weights version (counted from 0).

        Raises:
            ConfigError: ``path`` is no local model directory.
            CheckpointError: a file is damaged or cannot be loaded.
        """
        from budgetmix.training.data.models import load_pretrained

        loaded, _tokenizer = load_pretrained(path)
        with self._lock:
            self.model.load_state_dict(loaded.state_dict())
            if self.cache is not None:
                self.cache.clear()
            self.weights_version += 1
            return self.weights_version

    def drain_log(self) -> list[ServedCompletion]:
        """The completions logged since the last drain (at most ``log_size``); clears the log."""
        with self._lock:
            out, self.log = self.log, []
            return out

    # -- requests ----------------------------------------------------------------------
    def chat_completion(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """The response body for one Chat Completions request body (the HTTP handler's
        work, callable directly).

        Raises:
            _BadRequest: a malformed request, a stream, or one past ``max_model_len``.
        """
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise _BadRequest("messages must be a non-empty list")
        if body.get("stream"):
            raise _BadRequest("stream=true is not supported by this server")
        if body.get("n", 1) not in (1, None):
            raise _BadRequest("only n=1 is supported")
        tools = _tool_specs(body.get("tools"))
        try:
            prompt = self.template.encode(
                self.template.render(messages, tools, add_generation_prompt=True)
            )
        except ConfigError as exc:
            raise _BadRequest(str(exc)) from exc
        room = self.max_model_len - len(prompt)
        limit = body.get("max_completion_tokens", body.get("max_tokens"))
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise _BadRequest(f"max_tokens must be an integer, got {limit!r}")
        max_tokens = room if limit is None else limit
        if max_tokens < 1 or len(prompt) + max_tokens > self.max_model_len:
            raise _BadRequest(
                f"This model's maximum context length is {self.max_model_len} tokens. However, "
                f"you requested {len(prompt) + max_tokens} tokens ({len(prompt)} in the messages, "
                f"{max_tokens} in the completion)."
            )
        seed = body.get("seed")
        job = _Job(prompt, max_tokens, _number(body, "temperature", 1.0), seed)
        self._jobs.put(job)
        job.done.wait()
        if isinstance(job.result, BaseException):
            raise job.result
        return self._response(body, prompt, job.result)

    def _response(self, body: Mapping[str, Any], prompt: list[int], gen: Any) -> dict[str, Any]:
        ids = list(gen.ids)
        stops = self.template.stop_token_ids
        text_ids = ids[:-1] if gen.stopped else ids
        text = str(self.tokenizer.decode(text_ids, skip_special_tokens=True))
        with self._count_lock:
            call = self._calls
            self._calls += 1
        content, calls = self.template.parse(text, id_prefix=f"call_{call}")
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in calls
            ]
        finish = "length" if not gen.stopped else ("tool_calls" if calls else "stop")
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish}
        if gen.stopped:
            choice["stop_reason"] = ids[-1] if ids[-1] in stops else None
        if body.get("logprobs"):
            as_ids = bool(body.get("return_tokens_as_token_ids"))
            choice["logprobs"] = {
                "content": [
                    {
                        "token": f"token_id:{t}" if as_ids else self.tokenizer.decode([t]),
                        "logprob": lp,
                        "bytes": None,
                        "top_logprobs": [],
                    }
                    for t, lp in zip(ids, gen.logprobs, strict=True)
                ]
            }
        out: dict[str, Any] = {
            "id": f"chatcmpl-local-{call}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": [choice],
            "usage": {
                "prompt_tokens": len(prompt),
                "completion_tokens": len(ids),
                "total_tokens": len(prompt) + len(ids),
            },
        }
        if body.get("return_token_ids"):
            out["prompt_token_ids"] = prompt
            choice["token_ids"] = ids
        return out

    # -- the sampler thread ------------------------------------------------------------
    def _sample_forever(self) -> None:
        """Continuous batching (:mod:`~budgetmix.training.serving.continuous`): while
        requests run, every forward pass admits the requests that arrived meanwhile. From
        idle, the first request waits ``batch_window_s`` for others to start with it. The
        model lock is held while any request runs: weights reload between busy periods."""
        import torch
        from budgetmix.training.rollouts.attention import grouped_attention
        from budgetmix.training.serving.continuous import ContinuousBatch

        batch = ContinuousBatch(
            self.model,
            cache=self.cache,
            stop_ids=frozenset(self.template.stop_token_ids),
            shared=self.generator,
            max_rows=self.max_batch,
        )
        waiting: list[_Job] = []
        while True:
            first = self._jobs.get()
            if first is None:
                return
            waiting.append(first)
            stop = self._gather(waiting, time.monotonic() + self.batch_window_s)
            with self._lock:
                was_training = self.model.training
                self.model.eval()
                try:
                    with torch.no_grad(), grouped_attention(self.model):
                        while waiting or batch.running:
                            joining, waiting = waiting[: batch.room], waiting[batch.room :]
                            batch.step([self._request(job) for job in joining])
                            stop = self._gather(waiting, None) or stop
                finally:
                    self.model.train(was_training)
            if stop:
                return

    def _gather(self, waiting: list[_Job], until: float | None) -> bool:
        """Move queued jobs to ``waiting``: those queued now and, with ``until``, those that
        arrive before then while fewer than ``max_batch`` wait. True when the server is
        closing."""
        while True:
            if until is None or len(waiting) >= self.max_batch:
                try:
                    job = self._jobs.get_nowait()
                except queue.Empty:
                    return False
            else:
                try:
                    job = self._jobs.get(timeout=max(0.0, until - time.monotonic()))
                except queue.Empty:
                    return False
            if job is None:
                return True
            waiting.append(job)

    def _request(self, job: _Job) -> Any:
        """``job`` as the batch samples it; its completion is logged when it ends."""
        import torch
        from budgetmix.training.serving.continuous import Request

        own = None if job.seed is None else torch.Generator().manual_seed(job.seed)

        def finish(result: Any) -> None:
            if not isinstance(result, BaseException):
                reason = "length" if not result.stopped else "stop"
                self.log.append(
                    ServedCompletion(
                        tuple(job.prompt_ids),
                        result.ids,
                        result.logprobs,
                        reason,
                        self.weights_version,
                    )
                )
                del self.log[: max(0, len(self.log) - self.log_size)]
            job.result = result
            job.done.set()

        return Request(job.prompt_ids, job.max_tokens, job.temperature, own, finish)


class _Handler(BaseHTTPRequestHandler):
    """The HTTP side of :class:`LocalOpenAIServer` (``app`` is set per server)."""

    app: LocalOpenAIServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: tests and benches read the server's own log, not stderr."""

    def _send(self, status: int, payload: Mapping[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str, kind: str) -> None:
        self._send(status, {"error": {"message": message, "type": kind, "code": status}})

    def do_GET(self) -> None:
        """``/v1/models`` and ``/health``."""
        if self.path.rstrip("/") == "/v1/models":
            model = {"id": self.app.model_name, "object": "model", "owned_by": "budgetmix"}
            self._send(200, {"object": "list", "data": [model]})
        elif self.path == "/health":
            self._send(200, {"status": "ok"})
        else:
            self._error(404, f"no route {self.path}", "not_found_error")

    def do_POST(self) -> None:
        """``/v1/chat/completions`` and ``/reload_weights``."""
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
            if not isinstance(body, dict):
                raise _BadRequest("the request body must be a JSON object")
            if self.path.rstrip("/") == "/v1/chat/completions":
                self._send(200, self.app.chat_completion(body))
            elif self.path.rstrip("/") == "/reload_weights":
                path = body.get("path")
                if not isinstance(path, str):
                    raise _BadRequest("reload_weights needs {'path': <model directory>}")
                self._send(200, {"weights_version": self.app.reload_weights(path)})
            else:
                self._error(404, f"no route {self.path}", "not_found_error")
        except (_BadRequest, ValueError) as exc:  # ConfigError is a ValueError
            self._error(400, str(exc), "BadRequestError")
        except Exception as exc:  # a failure of the model: the client sees a 500
            self._error(500, f"{type(exc).__name__}: {exc}", "InternalServerError")
