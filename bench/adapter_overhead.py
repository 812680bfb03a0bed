"""What the provider adapters cost per model call, and what they keep of the prompt cache.

    .venv/bin/python bench/adapter_overhead.py [--calls 20] [--repeats 40] [--server process]
        [--round-trips 10]

1. Latency: the same ``openai.OpenAI`` client against the same loopback fake
   server (``budgetmix.adapters.testing.fake_server``, in its own process like a local
   vLLM or Ollama; ``--server thread`` puts it on a thread here), unwrapped,
   wrapped with ``budgeted(...)``, and with ``BudgetTransport`` in its HTTP
   client, for two requests: an agent's first turn (system prompt and task, the
   smallest request, so the worst case for a relative overhead; whole and
   streamed) and a mid-episode turn (the same after ``--round-trips`` tool calls
   and results, what a tool-using agent sends on most turns). Each round (a fresh episode)
   times a block of calls of every variant right next to a block of its
   unwrapped baseline (alternating which goes first, rotating the variants'
   order), so machine load and position effects cancel; an A/A pair (unwrapped
   vs unwrapped) shows the noise floor. Reported: the median per-call time, and
   the overhead as the median of the paired block differences with their IQR (and as
   a share of the median call of the row's baseline). By default the wrapper sends a
   plain-JSON history without the SDK's per-message request transform (the identity
   for plain JSON), so it is faster than the unwrapped call; two more rows isolate
   its own work: ``sdk_transform=True`` (the SDK transforms the history, as
   unwrapped) against the unwrapped call, and the default wrapper against an
   unwrapped call that sends the history as is by hand (``extra_body``).
   The adapters' own CPU per call is measured apart, with the SDK call (or the
   inner transport) stubbed out, since loopback noise is larger than it.
2. Prefix stability: a 12-turn tool conversation rendered as request bytes. With
   budgetmix the notice is an ephemeral trailing message, so each request starts
   with the whole previous request up to its notice (what a provider's prompt
   cache can reuse). Rewriting the system prompt with the budget each turn
   changes the first message, so almost nothing is reused.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
from budgetmix import Budget, BudgetController, render_notice
from budgetmix.adapters import budgeted
from budgetmix.adapters._turn import TurnRequest
from budgetmix.adapters.http import BudgetTransport
from budgetmix.adapters.pricing import DEFAULT_PRICING
from budgetmix.adapters.testing import FakeLLMServer, Reply

NOTICE = "Budget (v1): turn 1 of 9, 9 turns left including this one."
MESSAGES = [
    {"role": "system", "content": "You are a careful assistant. " * 20},
    {"role": "user", "content": "Summarise the report in three bullet points."},
]


def quartiles(xs: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], q[1], q[2]


_SERVE = """
import sys
from budgetmix.adapters.testing import FakeLLMServer, Reply
server = FakeLLMServer(default=Reply.say("ok " * 20, input_tokens=300, output_tokens=20)).start()
print(server.base_url, flush=True)
sys.stdin.read()  # serve until the benchmark closes our stdin
"""


@contextlib.contextmanager
def loopback_server(where: str) -> Iterator[str]:
    """The fake server's base URL: in its own process (like a local vLLM or Ollama) or
    on a thread of this one (shares this process's GIL with the client)."""
    if where == "thread":
        with FakeLLMServer(
            default=Reply.say("ok " * 20, input_tokens=300, output_tokens=20)
        ) as server:
            yield server.base_url
        return
    proc = subprocess.Popen(
        [sys.executable, "-c", _SERVE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=10)


def agent_history(round_trips: int = 10) -> list[dict[str, Any]]:
    """A mid-episode request: the first turn's messages plus ``round_trips`` tool calls
    and their results (what a tool-using agent sends on most of its turns)."""
    history = list(MESSAGES)
    for i in range(round_trips):
        history += _tool_turn(i)
    return history


def latency(
    base_url: str, calls: int, repeats: int, messages: list[dict[str, Any]], *, streams: bool
) -> list[tuple[str, float, float, float, float, float]]:
    """Per variant: (name, median per call, its baseline's median per call, median paired
    difference, its first and third quartiles), in microseconds."""
    # every variant's block (and its warm-up) fits in one episode; "raise" makes a
    # budget that is too small fail the run instead of quietly ending a round early
    controller = BudgetController(Budget(turns=10 * calls + 10), exhaustion="raise")
    variants, baseline = _variants(base_url, controller, messages, streams=streams)
    for fn in variants.values():  # warm up connections and code paths
        with controller.episode():
            for _ in range(5):
                fn()
    return _paired(controller, variants, baseline, calls, repeats)


def _variants(
    base_url: str, controller: BudgetController, messages: list[dict[str, Any]], *, streams: bool
) -> tuple[dict[str, Callable[[], None]], dict[str, Callable[[], None]]]:
    """The calls to time, by row name, and the baseline each is paired with."""
    # one connection pool for all: every variant talks over the same keep-alive
    # connection to the same server, so only the adapters differ
    pool = httpx.HTTPTransport()

    def client(transport: Any) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=base_url,
            api_key="bench",
            max_retries=0,
            http_client=httpx.Client(transport=transport),
        )

    plain = client(pool)
    wrapped = budgeted(client(pool), controller)
    transformed = budgeted(client(pool), controller, sdk_transform=True)
    via_transport = client(BudgetTransport(pool, controller))
    by_hand = _by_hand(plain, messages)
    base_whole, base_stream = _whole(plain, messages), _streamed(plain, messages)
    variants: dict[str, Callable[[], None]] = {
        "unwrapped vs itself (A/A)": base_whole,
        "unwrapped + notice message by hand": by_hand["notice"],
        "unwrapped, history sent as is by hand (no SDK transform)": by_hand["as is"],
        "budgeted(client)": _whole(wrapped, messages),
        "budgeted(client, sdk_transform=True)": _whole(transformed, messages),
        "BudgetTransport": _whole(via_transport, messages),
        # like for like: the wrapper's own work (and the notice) against an unwrapped call
        # that skips the SDK's transform the same way
        "budgeted(client) vs history sent as is by hand": _whole(wrapped, messages),
    }
    if streams:
        variants |= {
            "unwrapped vs itself (A/A), stream": base_stream,
            "unwrapped + include_usage by hand, stream": by_hand["usage"],
            "budgeted(client), stream": _streamed(wrapped, messages),
            "BudgetTransport, stream": _streamed(via_transport, messages),
            # the same, against a stream that asks for usage too: what the wrapper adds
            # beyond the usage chunk a budget needs (the issue asks that usage be read)
            "budgeted(client), stream, vs include_usage by hand": _streamed(wrapped, messages),
        }
    baseline = {k: (base_stream if "stream" in k else base_whole) for k in variants}
    baseline["budgeted(client) vs history sent as is by hand"] = by_hand["as is"]
    if streams:
        baseline["budgeted(client), stream, vs include_usage by hand"] = by_hand["usage"]
    return variants, baseline


def _whole(client: Any, messages: list[dict[str, Any]]) -> Callable[[], None]:
    def call() -> None:
        client.chat.completions.create(model="gpt-4o", messages=messages)

    return call


def _streamed(client: Any, messages: list[dict[str, Any]]) -> Callable[[], None]:
    def call() -> None:
        for _ in client.chat.completions.create(model="gpt-4o", messages=messages, stream=True):
            pass

    return call


def _by_hand(plain: Any, messages: list[dict[str, Any]]) -> dict[str, Callable[[], None]]:
    """Unwrapped calls that do by hand one thing the wrapper does."""
    notice = {"role": "user", "content": NOTICE}

    def with_notice() -> None:  # what the wrapper sends, built by hand: one more message
        plain.chat.completions.create(model="gpt-4o", messages=[*messages, notice])

    def as_is() -> None:  # the history as the wrapper passes it: no SDK transform
        plain.chat.completions.create(
            model="gpt-4o", messages=[], extra_body={"messages": messages}
        )

    def usage() -> None:  # the stream's final usage chunk, asked for by hand
        opts = {"include_usage": True}
        create = plain.chat.completions.create
        for _ in create(model="gpt-4o", messages=messages, stream=True, stream_options=opts):
            pass

    return {"notice": with_notice, "as is": as_is, "usage": usage}


def _paired(
    controller: BudgetController,
    variants: dict[str, Callable[[], None]],
    baseline: dict[str, Callable[[], None]],
    calls: int,
    repeats: int,
) -> list[tuple[str, float, float, float, float, float]]:
    """Paired blocks: each variant's block of calls runs right next to a block of its
    baseline (alternating which goes first, rotating the variants' order per round),
    so load from elsewhere on the machine and position effects cancel out."""

    def timed(fn: Callable[[], None]) -> float:
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - start) / calls * 1e6

    samples: dict[str, list[float]] = {k: [] for k in variants}
    bases: dict[str, list[float]] = {k: [] for k in variants}
    diffs: dict[str, list[float]] = {k: [] for k in variants}
    names = list(variants)
    for r in range(repeats):
        order = names[r % len(names) :] + names[: r % len(names)]
        with controller.episode():  # a fresh episode per round, as an agent has per task
            for name in order:
                fn, base = variants[name], baseline[name]
                if r % 2:
                    t_base, t_var = timed(base), timed(fn)
                else:
                    t_var, t_base = timed(fn), timed(base)
                samples[name].append(t_var)
                bases[name].append(t_base)
                diffs[name].append(t_var - t_base)
    rows = []
    for name in variants:
        q1, med, q3 = quartiles(diffs[name])
        rows.append(
            (name, statistics.median(samples[name]), statistics.median(bases[name]), med, q1, q3)
        )
    return rows


_CANNED = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 0,
    "model": "gpt-4o",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 300, "completion_tokens": 20, "total_tokens": 320},
}


def cpu_cost(n: int = 20000) -> list[tuple[str, float]]:
    """The adapters' own work per call, with the SDK call / network replaced by a stub."""
    from openai.types.chat import ChatCompletion

    canned = ChatCompletion.model_validate(_CANNED)

    class StubCompletions:
        def create(self, **kwargs: Any) -> Any:
            return canned

    controller = BudgetController(Budget(turns=10 * n))
    wrapped = budgeted(openai.OpenAI(base_url="http://stub/v1", api_key="bench"), controller)
    wrapped.chat.completions._raw = StubCompletions()  # type: ignore[attr-defined]
    stub = StubCompletions()
    payload = json.dumps(_CANNED).encode()

    def inner(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "application/json"}, content=payload)

    mock = httpx.MockTransport(inner)
    transport = BudgetTransport(mock, controller)
    body = json.dumps({"model": "gpt-4o", "messages": MESSAGES}).encode()
    request = httpx.Request("POST", "http://stub/v1/chat/completions", content=body)

    def timed(fn: Callable[[], Any]) -> float:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        return (time.perf_counter() - start) / n * 1e6

    def through(t: Any) -> Callable[[], Any]:
        return lambda: t.handle_request(request).read()

    out: dict[str, list[float]] = {"sdk wrapper": [], "transport": []}
    with controller.episode():
        for _ in range(5):
            base = timed(lambda: stub.create(model="gpt-4o", messages=MESSAGES))
            out["sdk wrapper"].append(
                timed(lambda: wrapped.chat.completions.create(model="gpt-4o", messages=MESSAGES))
                - base
            )
            base = timed(through(mock))
            out["transport"].append(timed(through(transport)) - base)
    return [(k, statistics.median(v)) for k, v in out.items()]


def _tool_turn(i: int) -> list[dict[str, Any]]:
    call = {
        "id": f"call_{i}",
        "type": "function",
        "function": {"name": "search", "arguments": json.dumps({"q": f"query {i}"})},
    }
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {
            "role": "tool",
            "tool_call_id": f"call_{i}",
            "content": f"result {i}: " + "lorem ipsum " * 30,
        },
    ]


def _anthropic(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in history[1:]:
        if m["role"] == "assistant":
            tc = m["tool_calls"][0]
            block = {
                "type": "tool_use",
                "id": tc["id"],
                "name": "search",
                "input": json.loads(tc["function"]["arguments"]),
            }
            out.append({"role": "assistant", "content": [block]})
        elif m["role"] == "tool":
            out.append(
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": m["tool_call_id"],
                            "content": m["content"],
                        }
                    ],
                }
            )
        else:
            out.append(m)
    return out


def _normalised(body: dict[str, Any]) -> dict[str, Any]:
    """Anthropic renders string content as one text block; compare what it caches."""
    msgs = [
        {**m, "content": [{"type": "text", "text": m["content"]}]}
        if isinstance(m.get("content"), str) and "system" in body
        else m
        for m in body["messages"]
    ]
    return {**body, "messages": msgs}


def common_prefix(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    lo, hi = 0, n  # binary search on equal prefixes (bytes compare in C)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def prefix_stability(turns: int = 12) -> list[tuple[str, float, float, str]]:
    """Per strategy: mean share of the previous request reused as prefix, the minimum,
    and whether every byte before the previous notice was kept."""
    controller = BudgetController(Budget(turns=turns))
    strategies: dict[str, list[tuple[bytes, int]]] = {
        "ours, chat": [],
        "ours, anthropic": [],
        "rewrite system prompt": [],
    }
    with controller.episode() as ep:
        history = list(MESSAGES)
        for i in range(turns):
            for kind, name in (("chat", "ours, chat"), ("anthropic", "ours, anthropic")):
                msgs = history if kind == "chat" else _anthropic(history)
                body: dict[str, Any] = {"model": "gpt-4o"}
                if kind == "anthropic":  # rendered (and cached) before the messages
                    body["system"] = MESSAGES[0]["content"]
                body["messages"] = msgs
                req = TurnRequest(ep, kind, body, DEFAULT_PRICING)  # type: ignore[arg-type]
                raw = json.dumps(_normalised(req.body)).encode()
                notice_at = raw.find(json.dumps(req.turn.notice or "")[1:-1].encode())
                strategies[name].append((raw, notice_at))
                if kind == "chat":
                    ep.ledger.refund_turn()  # two renderings of one turn
            notice = render_notice(ep.state, "v1")
            system = {"role": "system", "content": MESSAGES[0]["content"] + " " + notice}
            raw = json.dumps({"model": "gpt-4o", "messages": [system, *history[1:]]}).encode()
            strategies["rewrite system prompt"].append((raw, -1))
            history.extend(_tool_turn(i))
    rows = []
    for name, reqs in strategies.items():
        shares, kept = [], True
        for (prev, prev_notice), (cur, _) in itertools.pairwise(reqs):
            shared = common_prefix(prev, cur)
            shares.append(shared / len(prev))
            if prev_notice >= 0:
                # everything before the object holding the notice (and its separator):
                # its block, or its message when it is that message's only block
                start = prev.rfind(b"{", 0, prev_notice)
                if prev[:start].rstrip(b" ").endswith(b"["):
                    start = prev.rfind(b"{", 0, start)
                boundary = len(prev[:start].rstrip(b", "))
                kept = kept and shared >= boundary
        verdict = "yes" if kept and reqs[0][1] >= 0 else ("n/a" if reqs[0][1] < 0 else "no")
        rows.append((name, statistics.mean(shares), min(shares), verdict))
    return rows


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20, help="calls per timed block")
    parser.add_argument("--repeats", type=int, default=40, help="paired blocks per variant")
    parser.add_argument(
        "--server",
        choices=("process", "thread"),
        default="process",
        help="run the loopback fake server in its own process (default) or on a thread here",
    )
    parser.add_argument(
        "--round-trips",
        type=int,
        default=10,
        help="tool calls and results in the mid-episode request's history",
    )
    return parser.parse_args(argv)


def _latency_tables(args: argparse.Namespace) -> dict[bool, float]:
    """Print the latency tables; the first turn's A/A medians (whole and streamed)."""
    shapes = (
        ("first turn: system + user message", list(MESSAGES), True),
        (
            f"mid-episode: after {args.round_trips} tool round trips "
            f"({len(agent_history(args.round_trips))} messages)",
            agent_history(args.round_trips),
            False,
        ),
    )
    first: dict[bool, float] = {}
    with loopback_server(args.server) as base_url:
        for title, messages, streams in shapes:
            print(
                f"\n### Per-call latency, {title}; loopback fake server in a {args.server} "
                f"({args.repeats} paired blocks of {args.calls} calls each)\n"
            )
            print(
                "| variant | median per call (us) | overhead (us) | IQR of overhead (us) "
                "| overhead |"
            )
            print("|---|---:|---:|---:|---:|")
            rows = latency(base_url, args.calls, args.repeats, messages, streams=streams)
            base = {"stream" in r[0]: r[1] for r in rows if "A/A" in r[0]}
            first = first or base
            for name, med, base_med, over, q1, q3 in rows:
                pct = 100 * over / base_med  # against the median of this row's own baseline
                print(
                    f"| {name} | {med:.0f} | {over:+.0f} | [{q1:+.0f}, {q3:+.0f}] | {pct:+.1f}% |"
                )
    return first


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    print(
        f"python {sys.version.split()[0]}, openai {openai.__version__}, httpx {httpx.__version__}"
    )
    base = _latency_tables(args)
    print("\n### The adapters' own work per call (SDK/network stubbed out, median of 5 x 20k)\n")
    print("| layer | added CPU per call (us) | share of the unwrapped loopback call |")
    print("|---|---:|---:|")
    for name, cost in cpu_cost():
        print(f"| {name} | {cost:.1f} | {100 * cost / base[False]:.1f}% |")
    print("\n### Prompt bytes kept as an identical prefix from one turn to the next (12 turns)\n")
    print(
        "| strategy | previous request reused (mean) | worst turn | all bytes before notice kept |"
    )
    print("|---|---:|---:|---|")
    for name, mean, worst, kept in prefix_stability():
        print(f"| {name} | {100 * mean:.1f}% | {100 * worst:.1f}% | {kept} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
