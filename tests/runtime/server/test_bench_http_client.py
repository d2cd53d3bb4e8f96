"""The serving benchmark's pooled client: the connections it opens before a load are the
ones the load's requests use, so no TCP connect falls inside the timed window. A real
aiohttp server on loopback records which connection carried each request."""
from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp import web

from kubellm.runtime.cli.bench.http_client import PooledClient
from kubellm.runtime.cli.bench.serve import Sample

TOKENS = 3


def recording_app(seen: dict[str, list]) -> web.Application:
    async def health(request):
        seen["health"].append(request.transport)
        return web.Response(text="ok")

    async def completions(request):
        seen["completions"].append(request.transport)
        body = await request.json()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for _ in range(TOKENS):
            await response.write(b'data: {"choices":[{"text":"a"}]}\n\n')
        usage = {"choices": [], "usage": {"completion_tokens": TOKENS,
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
