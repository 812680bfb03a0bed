"""The client's CPU per Chat Completions request with and without TokenCapture (server rollouts).

    .venv/bin/python bench/token_capture.py [--reply 2000] [--prompt 3000] [--repeats 9]

Server rollouts ask every request for vLLM's ids and log-probs (``return_token_ids``,
``logprobs``): a reply of n sampled ids comes back with n log-prob objects and
``prompt_token_ids``. :class:`~budgetmix.training.serving.server_tokens.TokenCapture` records
them and hands the OpenAI SDK the response without what the agent's own request did
not ask for. Two clients call ``chat.completions.create`` against the same canned vLLM
response (``--reply`` sampled ids, ``--prompt`` prompt ids) over ``httpx.MockTransport``:

* ``SDK reads all``: ``openai.OpenAI`` handed the whole response (what the SDK parsed
  before TokenCapture trimmed it: a model object per sampled id);
* ``TokenCapture``: the same client over ``TokenCapture``, which parses the response
  once, records the exchange in an episode's token log, and hands on the trimmed body.

They alternate, ``--repeats`` samples of ``--calls`` requests each; the table gives the
median CPU ms per request (process time) with the spread, and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import httpx
import openai
from budgetmix.training.serving.server_tokens import TokenCapture, TokenLog, token_log


def vllm_response(reply: int, prompt: int) -> bytes:
    """A vLLM Chat Completions response with ids and log-probs of ``reply`` sampled ids."""
    content: list[dict[str, Any]] = [
        {"token": f"token_id:{i}", "logprob": -0.5, "bytes": None, "top_logprobs": []}
        for i in range(reply)
    ]
    body = {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "prompt_token_ids": list(range(prompt)),
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "token_ids": list(range(reply)),
                "message": {"role": "assistant", "content": "ok " * reply},
                "logprobs": {"content": content},
            }
        ],
        "usage": {"prompt_tokens": prompt, "completion_tokens": reply, "total_tokens": 0},
    }
    return json.dumps(body).encode()


def clients(content: bytes) -> dict[str, Callable[[], Any]]:
    """One ``create`` call per path, on clients made once."""

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=content, headers={"content-type": "application/json"})

    def made(transport: httpx.BaseTransport) -> openai.OpenAI:
        http: Any = httpx.Client(transport=transport)
        return openai.OpenAI(api_key="k", base_url="http://127.0.0.1:9/v1", http_client=http)

    plain = made(httpx.MockTransport(answer))
    captured = made(TokenCapture(httpx.MockTransport(answer)))
    messages: list[Any] = [{"role": "user", "content": "go"}]

    def capture() -> Any:
        slot = token_log.set(TokenLog())
        try:
            return captured.chat.completions.create(model="m", messages=messages)
        finally:
            token_log.reset(slot)

    return {
        "SDK reads all": lambda: plain.chat.completions.create(model="m", messages=messages),
        "TokenCapture": capture,
    }


def run(args: argparse.Namespace) -> str:
    """Alternate the paths; the markdown table."""
    paths = clients(vllm_response(args.reply, args.prompt))
    samples: dict[str, list[float]] = {name: [] for name in paths}
    for fn in paths.values():
        fn()  # warm
    for rep in range(args.repeats):
        for name in paths if rep % 2 == 0 else list(paths)[::-1]:
            fn = paths[name]
            t0 = time.process_time_ns()
            for _ in range(args.calls):
                fn()
            samples[name].append((time.process_time_ns() - t0) / 1e6 / args.calls)
    lines = [
        f"reply {args.reply} sampled ids, prompt {args.prompt} ids, {args.repeats} samples of "
        f"{args.calls} requests, alternating",
        "",
        "| path | CPU ms per request (median, min-max) |",
        "|---|---|",
    ]
    for name, xs in samples.items():
        lines.append(f"| {name} | {statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f}) |")
    ratio = statistics.median(samples["TokenCapture"]) / statistics.median(
        samples["SDK reads all"]
    )
    lines += ["", f"TokenCapture / SDK reads all: {ratio:.2f}x"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Parse the arguments, run, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reply", type=int, default=2000, help="sampled ids per reply")
    parser.add_argument("--prompt", type=int, default=3000, help="prompt ids per request")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--calls", type=int, default=20)
    print(run(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
