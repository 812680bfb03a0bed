"""What ``budgetmix gateway`` adds to a model call, side by side with LiteLLM's proxy.

    .venv/bin/python bench/gateway.py [--calls 300] [--clients 200] [--requests 4000]
        [--litellm .venv-litellm/bin/litellm] [--httpx-pool] [--bare-proxy]

One fast fake upstream (a pure ASGI app on uvicorn, in its own process: constant Chat
Completions bodies, whole and streamed) and, each in its own process, ``budgetmix
gateway`` on its embedded default store (SQLite) with a per-conversation budget, and
LiteLLM's proxy with a budget configured (``litellm_settings.max_budget``, the budget it
keeps without a database; its per-key budgets need Postgres). LiteLLM's proxy extras pin
older versions of packages budgetmix uses, so it runs from a virtualenv of its own::

    python3 -m venv .venv-litellm && .venv-litellm/bin/pip install 'litellm[proxy]'

``--httpx-pool`` adds the same gateway on httpx's own (httpcore's) upstream pool, the one it
had before aiohttp's (row ``gw-httpx``), so the pool's share is measured side by side.
``--bare-proxy`` adds :class:`BareProxy` (row ``bare``): uvicorn and the same pool, passing
requests through unbudgeted, the floor under any gateway on this stack.

1. Latency: one keep-alive client sends ``--calls`` requests on each path in turn (direct,
   gateway, bare; each round rotates the order, so machine load falls on all alike),
   whole and streamed (to the last byte), then the same with the direct call and LiteLLM's
   proxy alone: LiteLLM keeps working after it answers (its logging and spend updates
   run after the response), which slowed the next calls on every other path by 0.2-0.5
   ms when it shared their rotation. Reported: p50 and p99 per path, and the p50/p99
   each proxy adds over the direct calls of its own rotation.
2. Throughput: ``--clients`` concurrent clients send ``--requests`` requests on each path;
   requests per second.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "gateway"))

from _servers import free_port, wait_port  # noqa: E402

#: every path gets this key: LiteLLM's proxy needs it as its master key; budgetmix passes it on
KEY = "sk-bench-" + "5f3a9c1e7b2d4f60" * 4
BODY = {"model": "m", "messages": [{"role": "user", "content": "Say hi."}]}
_WHOLE = json.dumps({
    "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 8, "completion_tokens": 1, "total_tokens": 9},
}).encode()


def _chunk(delta: dict[str, Any], finish: str | None = None, usage: bool = False) -> bytes:
    body: dict[str, Any] = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                            "model": "m", "choices": [{"index": 0, "delta": delta,
                                                       "finish_reason": finish}]}
    if usage:
        body["choices"] = []
        body["usage"] = {"prompt_tokens": 8, "completion_tokens": 1, "total_tokens": 9}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


_STREAM = [_chunk({"role": "assistant", "content": ""}), _chunk({"content": "hi"}),
           _chunk({}, "stop"), _chunk({}, usage=True), b"data: [DONE]\n\n"]


async def _body(receive: Any) -> bytes:
    """An ASGI request's whole body."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


async def upstream_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The fake upstream: every POST answered with the constant completion."""
    if scope["type"] != "http":
        return
    body = await _body(receive)
    stream = b'"stream": true' in body or b'"stream":true' in body
    if stream:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})
        for part in _STREAM:
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    else:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(_WHOLE)).encode())]})
        await send({"type": "http.response.body", "body": _WHOLE})


class BareProxy:
    """``--bare-proxy``: the floor under any Python gateway on this stack. The same uvicorn
    and the same upstream pool as ``budgetmix gateway``, forwarding every request as it
    came: no budget, no store, no notice, no parsing."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.pool: Any = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        from budgetmix.gateway.app import upstream_transport

        if self.pool is None:
            self.pool = upstream_transport(httpx.Limits(max_connections=2000))
        body = await _body(receive)
        keep = [(k, v) for k, v in scope["headers"] if k not in (b"host", b"content-length")]
        request = httpx.Request("POST", self.upstream + scope["path"], headers=keep, content=body)
        response = await self.pool.handle_async_request(request)
        await send({"type": "http.response.start", "status": response.status_code,
                    "headers": [(k, v) for k, v in response.headers.raw
                                if k.lower() not in (b"transfer-encoding", b"connection")]})
        async for chunk in response.aiter_raw():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await response.aclose()
        await send({"type": "http.response.body", "body": b""})


def _bare_proxy(upstream: str, work: Path) -> tuple[Any, str]:
    port = free_port()
    code = ("import sys; sys.path.insert(0, 'bench'); import uvicorn, gateway; "
            f"uvicorn.run(gateway.BareProxy({upstream!r}), host='127.0.0.1', port={port}, "
            "log_level='error', access_log=False, timeout_keep_alive=65, backlog=4096)")
    return _start([sys.executable, "-c", code], port, work / "bare.log"), f"http://127.0.0.1:{port}"


def _start(args: list[str], port: int, log: Path, env: dict[str, str] | None = None) -> Any:
    out = log.open("w")
    proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
                            env={**os.environ, **(env or {})})
    try:
        wait_port(port, timeout=120)
    except TimeoutError:
        proc.kill()
        raise SystemExit(f"{args[0]} did not start: {log.read_text()[-2000:]}") from None
    return proc


def _litellm(exe: str, upstream: str, work: Path) -> tuple[Any, str] | None:
    if not Path(exe).exists():
        print(f"LiteLLM proxy: {exe} not found; its rows are left out (see the docstring)")
        return None
    port = free_port()
    config = work / "litellm.yaml"
    config.write_text(
        "model_list:\n  - model_name: m\n    litellm_params:\n      model: openai/m\n"
        f"      api_base: {upstream}/v1\n      api_key: sk-bench\n"
        "litellm_settings:\n  max_budget: 1000000\n  budget_duration: 30d\n"
        f"general_settings:\n  master_key: {KEY}\n"
    )
    env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR"}
    proc = _start([exe, "--config", str(config), "--port", str(port), "--host", "127.0.0.1",
                   "--num_workers", "1"], port, work / "litellm.log", env)
    return proc, f"http://127.0.0.1:{port}"


#: ``--httpx-pool``: the same gateway with httpx's own (httpcore's) upstream pool, the one
#: it had before aiohttp's: what the pool alone changes, side by side
_HTTPX_POOL = ("import sys, httpx, budgetmix.gateway.app as app; "
               "app.upstream_transport = lambda limits: httpx.AsyncHTTPTransport(limits=limits); "
               "from budgetmix.cli import main; sys.argv[0] = 'budgetmix'; sys.exit(main())")


def _gateway(upstream: str, work: Path, name: str = "gateway") -> tuple[Any, str]:
    port = free_port()
    launch = ["-c", _HTTPX_POOL] if name == "gw-httpx" else ["-m", "budgetmix.cli"]
    args = [sys.executable, *launch, "gateway", "--upstream", upstream, "--port", str(port),
            "--store", f"sqlite://{work}/{name}.db", "--turns", "1000000000"]
    return _start(args, port, work / f"{name}.log"), f"http://127.0.0.1:{port}"


def _one(client: httpx.Client, url: str, stream: bool) -> float:
    body = {**BODY, "stream": True} if stream else BODY
    t = time.perf_counter()
    if stream:
        with client.stream("POST", url, json=body) as r:
            for _ in r.iter_raw():
                pass
    else:
        r = client.post(url, json=body)
        r.read()
    elapsed = time.perf_counter() - t
    if r.status_code != 200:
        raise SystemExit(f"{url}: HTTP {r.status_code} {r.text[:200]}")
    return elapsed


def latency(
    paths: dict[str, str], calls: int, stream: bool, pids: dict[str, int], cpu: dict[str, float]
) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in paths}
    headers = {"authorization": f"Bearer {KEY}", "x-budgetmix-conversation": "bench"}
    with httpx.Client(headers=headers, timeout=30) as client:
        names = list(paths)
        for name in names:  # warm up each path (connections, caches)
            for _ in range(20):
                _one(client, paths[name], stream)
        before = {name: _cpu_seconds(pid) for name, pid in pids.items()}
        for i in range(calls):
            order = names[i % len(names):] + names[: i % len(names)]
            for name in order:
                times[name].append(_one(client, paths[name], stream))
        for name, pid in pids.items():  # each process's own CPU per request it served
            served = calls * len(paths) if name == "direct" else calls  # upstream: every path's
            cpu[name] = 1000 * (_cpu_seconds(pid) - before[name]) / served
    return times


async def _throughput(url: str, clients: int, requests: int) -> tuple[float, int]:
    """Requests per second answered 200, and how many were not."""
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients,
                          keepalive_expiry=2.0)
    failed = [0]
    async with httpx.AsyncClient(limits=limits, timeout=120) as http:
        left = [requests]

        async def client(i: int) -> None:
            headers = {"authorization": f"Bearer {KEY}", "x-budgetmix-conversation": f"c{i}"}
            while left[0] > 0:
                left[0] -= 1
                try:
                    r = await http.post(url, json=BODY, headers=headers)
                    failed[0] += r.status_code != 200
                except httpx.HTTPError:
                    failed[0] += 1

        t = time.perf_counter()
        await asyncio.gather(*(client(i) for i in range(clients)))
        return (requests - failed[0]) / (time.perf_counter() - t), failed[0]


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (Linux /proc), its waited-for children too."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _report(
    kind: str,
    times: dict[str, list[float]],
    cpu: dict[str, float],
    apart: dict[str, list[float]] | None = None,
) -> None:
    direct = times["direct"]
    print(f"\n{kind}: per call, ms (p50 / p99), added over direct; CPU ms per request of the "
          "process (direct: the upstream, which serves every path)")  # fmt: skip
    rows = [(name, values, direct) for name, values in times.items()]
    if apart is not None:  # LiteLLM, in a rotation of its own with the direct call
        rows.append(("litellm*", apart["litellm"], apart["direct"]))
    for name, values, base in rows:
        line = f"  {name:<10} {_ms(values, 0.5):7.2f} / {_ms(values, 0.99):7.2f}"
        if name != "direct":
            line += (f"   added p50 {_ms(values, 0.5) - _ms(base, 0.5):+.2f}"
                     f"  p99 {_ms(values, 0.99) - _ms(base, 0.99):+.2f}")  # fmt: skip
        if name.rstrip("*") in cpu:
            line += f"   cpu {cpu[name.rstrip('*')]:.2f}"
        print(line)
    if apart is not None:
        ours = _ms(times["gateway"], 0.5) - _ms(direct, 0.5)
        theirs = _ms(apart["litellm"], 0.5) - _ms(apart["direct"], 0.5)
        print(f"  * beside its own direct calls (p50 {_ms(apart['direct'], 0.5):.2f})"
              f"; gateway's added p50 / LiteLLM proxy's: {ours / theirs:.2f}")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=300)
    p.add_argument("--clients", type=int, default=200)
    p.add_argument("--requests", type=int, default=4000)
    p.add_argument("--litellm", default=str(ROOT / ".venv-litellm" / "bin" / "litellm"))
    p.add_argument("--bare-proxy", action="store_true",
                   help="also a pass-through proxy on the same stack, no budget (row bare)")
    p.add_argument("--httpx-pool", action="store_true",
                   help="also the gateway on httpx's own upstream pool (row gw-httpx)")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-gateway-"))
    up_port = free_port()
    procs = [_start([sys.executable, "-c", "import sys; sys.path.insert(0, 'bench'); "
                     "import uvicorn, gateway; uvicorn.run(gateway.upstream_app, host='127.0.0.1',"
                     f" port={up_port}, log_level='error', access_log=False,"
                     " timeout_keep_alive=65, backlog=4096)"],
                    up_port, work / "upstream.log")]
    upstream = f"http://127.0.0.1:{up_port}"
    try:
        gw, gw_url = _gateway(upstream, work)
        procs.append(gw)
        paths = {"direct": upstream + "/v1/chat/completions",
                 "gateway": gw_url + "/v1/chat/completions"}
        pids = {"direct": procs[0].pid, "gateway": gw.pid}
        if args.bare_proxy:
            bare, bare_url = _bare_proxy(upstream, work)
            procs.append(bare)
            paths["bare"], pids["bare"] = bare_url + "/v1/chat/completions", bare.pid
        if args.httpx_pool:
            old, old_url = _gateway(upstream, work, "gw-httpx")
            procs.append(old)
            paths["gw-httpx"], pids["gw-httpx"] = old_url + "/v1/chat/completions", old.pid
        lite = _litellm(args.litellm, upstream, work)
        if lite is not None:
            procs.append(lite[0])
            paths["litellm"] = lite[1] + "/v1/chat/completions"
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average "
              f"{os.getloadavg()[0]:.1f}; {args.calls} calls per path and kind")
        if lite is not None:
            pids["litellm"] = lite[0].pid
        ours = {name: url for name, url in paths.items() if name != "litellm"}
        for stream in (False, True):
            cpu: dict[str, float] = {}
            times = latency(ours, args.calls, stream, {n: pids[n] for n in ours}, cpu)
            apart = None
            if lite is not None:
                theirs = {"direct": paths["direct"], "litellm": paths["litellm"]}
                apart = latency(theirs, args.calls, stream, {"litellm": pids["litellm"]}, cpu)
            _report("streamed" if stream else "whole", times, cpu, apart)
        print(f"\nthroughput, {args.clients} concurrent clients, {args.requests} requests")
        for name, url in paths.items():
            rate, failed = asyncio.run(_throughput(url, args.clients, args.requests))
            print(f"  {name:<10} {rate:8.0f} requests/s  ({failed} not answered 200)")
    finally:
        for proc in procs:
            proc.kill()


if __name__ == "__main__":
    main()
