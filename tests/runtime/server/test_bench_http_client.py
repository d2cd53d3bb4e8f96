"""The serving benchmark's pooled client: the connections it opens before a load are the
ones the load's requests use, so no TCP connect falls inside the timed window. A real
aiohttp server on loopback records which connection carried each request."""
from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp import web

from kubellm.runtime.cli.bench.http_client import PooledClient
from kubellm.runtime.cli.bench.sending import Sample

TOKENS = 3


def recording_app(seen: dict[str, list], tokens=lambda body: TOKENS) -> web.Application:
    """Records the connection of every request; a stream has ``tokens(body)`` tokens."""
    async def health(request):
        seen["health"].append(request.transport)
        return web.Response(text="ok")

    async def completions(request):
        seen["completions"].append(request.transport)
        body = await request.json()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for _ in range(tokens(body)):
            await response.write(b'data: {"choices":[{"text":"a"}]}\n\n')
        usage = {"choices": [], "usage": {"completion_tokens": tokens(body),
                                          "prompt_tokens": len(body["prompt"])}}
        await response.write(f"data: {json.dumps(usage, separators=(',', ':'))}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_post("/v1/completions", completions)
    return app


async def one_load(kind: str, num: int) -> tuple[dict, list]:
    seen = {"health": [], "completions": []}
    runner = web.AppRunner(recording_app(seen))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        async with PooledClient(f"http://127.0.0.1:{port}", None, kind, num + 8, TOKENS,
                                "m", Sample) as client:
            await client.open_connections(num)
            bodies = [client.encode([1, 2]) for _ in range(num)]
            samples = await asyncio.gather(*(client.complete(b) for b in bodies))
    finally:
        await runner.cleanup()
    return seen, samples


@pytest.mark.parametrize("kind", ["aiohttp", "httpx"])
def test_a_load_runs_on_the_connections_opened_before_it(kind):
    num = 8
    seen, samples = asyncio.run(one_load(kind, num))
    opened = {id(t) for t in seen["health"]}
    used = {id(t) for t in seen["completions"]}
    assert len(opened) == num, "each probe needs a connection of its own"
    assert used <= opened, "a request opened a new connection inside the timed window"
    assert len(seen["completions"]) == num
    for sample in samples:
        assert sample.error is None and sample.num_output_tokens == TOKENS
        assert sample.ttft is not None and len(sample.gaps) == TOKENS - 1


def test_an_unknown_client_kind_is_refused():
    with pytest.raises(ValueError, match="aiohttp or httpx"):
        PooledClient("http://127.0.0.1:1", None, "requests", 4, 1, "m", Sample)


def test_a_refused_connection_is_a_counted_failure():
    async def run():
        async with PooledClient("http://127.0.0.1:1", None, "aiohttp", 4, 1, "m",
                                Sample) as client:
            await client.open_connections(2)   # fails quietly: the load reports it
            return await client.complete([1])
    sample = asyncio.run(run())
    assert sample.error and "Connect" in sample.error


def test_only_requests_due_soon_get_a_connection_opened_before_the_load():
    """A connection idle past the server's keep-alive timeout may be closed under the
    client: a burst gets one per request, a paced load only for its first seconds."""
    from kubellm.runtime.cli.bench.serve import PRE_OPEN_WITHIN_S, connections_to_open
    assert connections_to_open(512, float("inf"), 0) == 512
    paced = connections_to_open(512, 64.0, 0)
    assert 0.5 * 64 * PRE_OPEN_WITHIN_S < paced < 1.5 * 64 * PRE_OPEN_WITHIN_S
    assert connections_to_open(4, 1000.0, 0) == 4



class ServerThread:
    """An aiohttp app served on loopback from a thread of its own (the client processes'
    pool blocks the test's thread while a load runs)."""

    def __init__(self, app: web.Application):
        import threading
        self.app, self.ready = app, threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        assert self.ready.wait(30)
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc) -> None:
        self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(30)

    def _serve(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.loop.run_until_complete(self._run())

    async def _run(self) -> None:
        runner = web.AppRunner(self.app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        self.stop = asyncio.Event()
        self.ready.set()
        await self.stop.wait()
        await runner.cleanup()


def test_client_processes_send_on_connections_opened_before_and_keep_the_order():
    """The client spread over two processes (client_procs.py): each request's sample
    comes back at its place in the load (the server answers as many tokens as the
    prompt has), the load runs on connections opened before it, and each process
    opens only its share of the requests due soon."""
    from kubellm.runtime.cli.bench.client_procs import ClientProcesses
    from kubellm.runtime.cli.bench.serve import arrival_offsets

    seen = {"health": [], "completions": []}
    with ServerThread(recording_app(seen, tokens=lambda body: len(body["prompt"]))) as url:
        encoder = PooledClient(url, None, "aiohttp", 16, 1, "m", Sample)
        bodies = [encoder.encode([7] * (i + 1)) for i in range(6)]
        with ClientProcesses(2, (url, None, "aiohttp", 16, 1, "m")) as pool:
            assert pool.shares(5) == [[0, 2, 4], [1, 3]]
            samples, wall, cpu = pool.run(bodies, arrival_offsets(6, float("inf"), 0), 6)
            assert [s.num_output_tokens for s in samples] == [1, 2, 3, 4, 5, 6]
            assert all(s.error is None and s.ttft is not None for s in samples)
            assert wall > 0 and cpu >= 0
            opened = {id(t) for t in seen["health"]}
            assert len(opened) == 6, "each request due soon gets a connection"
            assert {id(t) for t in seen["completions"]} <= opened
            seen["health"].clear()
            samples, _, _ = pool.run(bodies[:4], [0.0, 0.001, 0.002, 0.003], 2)
            assert [s.num_output_tokens for s in samples] == [1, 2, 3, 4]
            assert len(seen["health"]) == 2, "one probe per process: requests 0 and 1"
    with pytest.raises(ValueError, match="client processes must be >= 1"):
        ClientProcesses(0, ())
