"""A loopback server speaking the part of vLLM's OpenAI-compatible API that TRL's client uses.

``GET /health``, ``GET /v1/models`` and ``POST /v1/completions`` with token-id
prompts, as ``trl.generation.vllm_client.VLLMClient.generate`` sends them
(``return_token_ids`` and ``return_tokens_as_token_ids`` required, ``n``,
``max_tokens``, ``logprobs``, ``stop_token_ids``, sampling settings) and as vLLM
answers: per choice ``prompt_token_ids``, ``token_ids`` (the stop id included) and
``logprobs`` with ``tokens`` as ``"token_id:<id>"``. Sampling is a local Hugging Face
model's (:class:`~budgetmix.training.rollouts.generation.ModelGenerator`, the model object the
trainer updates, so the weights are always current). Every answered prompt is logged.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import torch
from budgetmix.training.rollouts.generation import ModelGenerator


class VLLMWireServer:
    """``with VLLMWireServer(model, pad_token_id=...) as server: server.base_url``."""

    def __init__(self, model: Any, *, pad_token_id: int, seed: int = 0) -> None:
        self.model = model
        self.pad = pad_token_id
        self.gen = torch.Generator().manual_seed(seed)
        self.log: list[dict[str, Any]] = []  # {"prompt", "ids", "logprobs"} per answered prompt
        self.requests: list[dict[str, Any]] = []
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self._http.server_address[1]}"

    def __enter__(self) -> VLLMWireServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.shutdown()
        self._http.server_close()

    def completions(self, body: dict[str, Any]) -> dict[str, Any]:
        """vLLM's ``/v1/completions`` answer for token-id prompts."""
        self.requests.append(body)
        if not (body.get("return_token_ids") and body.get("return_tokens_as_token_ids")):
            raise ValueError("token ids were not asked for")
        prompts, n = body["prompt"], int(body.get("n", 1))
        sampler = ModelGenerator(
            self.model,
            pad_token_id=self.pad,
            stop_token_ids=body["stop_token_ids"],
            temperature=float(body.get("temperature", 1.0)),
            generator=self.gen,
        )
        contexts = [p for p in prompts for _ in range(n)]
        gens = sampler.generate_ids(contexts, int(body["max_tokens"]))
        choices = []
        for i, (prompt, g) in enumerate(zip(contexts, gens, strict=True)):
            self.log.append(
                {"prompt": list(prompt), "ids": list(g.ids), "logprobs": list(g.logprobs)}
            )
            tokens = [f"token_id:{t}" for t in g.ids]
            choices.append(
                {
                    "index": i,
                    "text": "",
                    "prompt_token_ids": list(prompt),
                    "token_ids": list(g.ids),
                    "finish_reason": "stop" if g.stopped else "length",
                    "logprobs": {
                        "tokens": tokens,
                        "token_logprobs": list(g.logprobs),
                        "top_logprobs": [{t: lp} for t, lp in zip(tokens, g.logprobs, strict=True)],
                        "text_offset": [0] * len(tokens),
                    },
                }
            )
        return {
            "id": "cmpl-local",
            "object": "text_completion",
            "model": "tiny",
            "choices": choices,
        }


def _handler(server: VLLMWireServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/health":
                self._send(200, {})
            elif self.path == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": "tiny", "object": "model"}]})
            else:
                self._send(404, {"error": self.path})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path != "/v1/completions":
                self._send(404, {"error": self.path})
                return
            try:
                self._send(200, server.completions(body))
            except (KeyError, ValueError) as exc:
                self._send(400, {"error": str(exc)})

    return Handler
