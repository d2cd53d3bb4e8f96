"""How long the serving benchmark's client takes to put a burst on the wire: the ms from
a load's start until each request body reached a server that only records arrivals and
answers one SSE event, with the client in one process and spread over N
(runtime/kubellm/runtime/cli/bench/client_procs.py). No GPU, no engine: the client alone.

    python -m benchmarks.serving.client_dispatch [--requests 64] [--processes 1,2,4]
        [--repeats 15] [--out DIR]

Prints one line per client layout: the median over repeats of the first and the last
body's arrival (ms after the start), and the last arrival's ratio to one process's.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import statistics
import sys
import time
from pathlib import Path


def _serve(port_conn, arrivals_conn) -> None:
    """The server process: records each body's arrival; GET /arrivals hands them over."""
    from aiohttp import web
    seen: list[float] = []

    async def health(request):
        return web.Response(text="ok")

    async def arrivals(request):
        arrivals_conn.send(list(seen))
        seen.clear()
        return web.Response(text="ok")

    async def completions(request):
        await request.read()
        seen.append(time.monotonic())
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b'data: {"choices":[{"text":"a"}]}\n\ndata: [DONE]\n\n')
        return response

    async def main():
        app = web.Application()
        app.router.add_get("/health", health)
        app.router.add_get("/arrivals", arrivals)
        app.router.add_post("/v1/completions", completions)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port_conn.send(site._server.sockets[0].getsockname()[1])
        await asyncio.Event().wait()
    asyncio.run(main())


def _fetch_arrivals(url: str, conn) -> list[float]:
    import httpx
    httpx.get(url + "/arrivals", timeout=30)
    return conn.recv()


def _one_process(url: str, bodies: list[bytes], repeats: int, conn) -> list[tuple]:
    from kubellm.runtime.cli.bench.http_client import PooledClient
    from kubellm.runtime.cli.bench.sending import Sample, send_at

    async def run():
        out = []
        async with PooledClient(url, None, "aiohttp", len(bodies) + 8, 1, "m",
                                Sample) as client:
            for _ in range(repeats):
                await client.open_connections(len(bodies))
                start = time.monotonic()
                await send_at(bodies, [0.0] * len(bodies), start, client.complete)
                got = await asyncio.to_thread(_fetch_arrivals, url, conn)
                out.append((start, got))
        return out
    return asyncio.run(run())


def _spread(url: str, bodies: list[bytes], repeats: int, processes: int, conn):
    from kubellm.runtime.cli.bench.client_procs import ClientProcesses
    out = []
    with ClientProcesses(processes, (url, None, "aiohttp", len(bodies) + 8, 1, "m")) as pool:
        for _ in range(repeats):
            starts = []
            pool.run(bodies, [0.0] * len(bodies), len(bodies), starts.append)
            out.append((starts[0], _fetch_arrivals(url, conn)))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--processes", default="1,2,4")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    from kubellm.runtime.cli.bench.http_client import completion_body

    context = multiprocessing.get_context("spawn")
    port_r, port_w = context.Pipe(duplex=False)
    arrivals_r, arrivals_w = context.Pipe(duplex=False)
    server = context.Process(target=_serve, args=(port_w, arrivals_w), daemon=True)
    server.start()
    try:
        url = f"http://127.0.0.1:{port_r.recv()}"
        body = json.dumps(completion_body(list(range(args.prompt_tokens)), 1, "m"),
                          separators=(",", ":")).encode()
        bodies = [body] * args.requests
        rows = []
        for n in (int(p) for p in args.processes.split(",")):
            runs = (_one_process(url, bodies, args.repeats, arrivals_r) if n == 1 else
                    _spread(url, bodies, args.repeats, n, arrivals_r))
            firsts = [1e3 * (min(got) - start) for start, got in runs]
            lasts = [1e3 * (max(got) - start) for start, got in runs]
            rows.append({"processes": n, "requests": args.requests,
                         "first_body_ms_p50": round(statistics.median(firsts), 3),
                         "last_body_ms_p50": round(statistics.median(lasts), 3)})
        base = rows[0]["last_body_ms_p50"] if rows[0]["processes"] == 1 else None
        for row in rows:
            if base:
                row["last_body_vs_one_process"] = round(row["last_body_ms_p50"] / base, 3)
            print("dispatch", json.dumps(row), flush=True)
        if args.out:
            Path(args.out).mkdir(parents=True, exist_ok=True)
            (Path(args.out) / "client_dispatch.json").write_text(json.dumps(rows, indent=1))
    finally:
        server.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
