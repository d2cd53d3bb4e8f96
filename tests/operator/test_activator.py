"""The activator (scale from zero) on loopback: it holds requests while no replica is
ready, shows them as the queue the autoscaler reads, and forwards them, streamed, once a
replica appears; errors come in OpenAI's shape. The replica here is a small aiohttp app;
tests/contract/test_routing_contract.py puts the real runtime server behind it."""
from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from kubellm.operator.activator.proxy import Activator
from kubellm.operator.activator.upstream import Upstreams, resolve_dns


class Replica:
    """A model server stand-in: /v1/echo answers with what it got; /v1/stream sends one
    SSE event, then a second once ``release`` is set."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.runner: web.AppRunner | None = None
        self.port = 0

    async def echo(self, request: web.Request) -> web.Response:
        return web.json_response({"path": request.path_qs, "method": request.method,
                                  "body": (await request.read()).decode(),
                                  "auth": request.headers.get("Authorization")})

    async def stream(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b"data: first\n\n")
        await self.release.wait()
        await response.write(b"data: second\n\ndata: [DONE]\n\n")
        return response

    async def __aenter__(self) -> "Replica":
        app = web.Application()
        app.router.add_route("*", "/v1/echo", self.echo)
        app.router.add_post("/v1/stream", self.stream)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc) -> None:
        await self.runner.cleanup()


class Front:
    """The activator app on a free port, with addresses the test sets."""

    def __init__(self, upstream_port: int, hold_timeout: float = 30.0) -> None:
        self.addresses: list[str] = []

        async def resolver(host: str) -> list[str]:
            return list(self.addresses)

        self.upstreams = Upstreams("replicas.test", upstream_port, 0.05, resolver)
        self.activator = Activator(self.upstreams, "chat", hold_timeout)

    async def __aenter__(self) -> "Front":
        self.runner = web.AppRunner(self.activator.app())
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc) -> None:
        await self.runner.cleanup()

    async def gauge(self, session: aiohttp.ClientSession, name: str) -> float:
        async with session.get(f"{self.url}/metrics") as resp:
            text = await resp.text()
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == name:
                    return s.value
        raise AssertionError(f"{name} not exported")


async def _until(check, what: str, timeout: float = 30.0):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        if await check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def test_a_request_is_held_until_a_replica_is_ready_then_forwarded():
    async with Replica() as replica, Front(replica.port) as front, \
            aiohttp.ClientSession() as session:
        call = asyncio.create_task(session.post(
            f"{front.url}/v1/echo?x=1", data=b'{"model": "chat"}',
            headers={"Authorization": "Bearer k"}))
        # Held: the autoscaler sees it as one waiting request at zero replicas.
        await _until(lambda: _is(front.gauge(session, "vllm:num_requests_waiting"), 1.0),
                     "one held request")
        assert not call.done()
        front.addresses = ["127.0.0.1"]  # the first replica turns ready
        resp = await asyncio.wait_for(call, 30)
        assert resp.status == 200
        assert await resp.json() == {"path": "/v1/echo?x=1", "method": "POST",
                                     "body": '{"model": "chat"}', "auth": "Bearer k"}
        assert await front.gauge(session, "vllm:num_requests_waiting") == 0
        assert await front.gauge(session, "kubellm:activator_hold_seconds_count") == 1
        assert await front.gauge(session, "kubellm:activator_requests_total") >= 0


async def _is(value, expected) -> bool:
    return await value == expected


async def test_streams_pass_through_as_they_come():
    async with Replica() as replica, Front(replica.port) as front, \
            aiohttp.ClientSession() as session:
        front.addresses = ["127.0.0.1"]
        await front.upstreams.refresh()
        async with session.post(f"{front.url}/v1/stream", data=b"{}") as resp:
            assert resp.headers["Content-Type"] == "text/event-stream"
            first = await asyncio.wait_for(resp.content.readuntil(b"\n\n"), 30)
            assert first == b"data: first\n\n"  # before the replica sends the rest
            assert await front.gauge(session, "vllm:num_requests_running") == 1
            replica.release.set()
            rest = await asyncio.wait_for(resp.content.read(), 30)
        assert rest == b"data: second\n\ndata: [DONE]\n\n"


async def test_no_replica_in_time_is_a_503_in_openai_shape():
    async with Front(upstream_port=9, hold_timeout=0.3) as front, \
            aiohttp.ClientSession() as session:
        async with session.post(f"{front.url}/v1/chat/completions", data=b"{}") as resp:
            assert resp.status == 503
            assert resp.headers["Retry-After"] == "30"
            error = (await resp.json())["error"]
        assert error["code"] == "no_replica_ready" and "0.3s" in error["message"]
        assert error["type"] == "service_unavailable"
        assert await front.gauge(session, "vllm:num_requests_waiting") == 0


async def test_a_replica_that_refuses_is_skipped():
    async with Replica() as replica, Front(replica.port) as front, \
            aiohttp.ClientSession() as session:
        # 127.0.0.2 is loopback too, but nothing listens there: connection refused.
        front.addresses = ["127.0.0.2", "127.0.0.1"]
        await front.upstreams.refresh()
        for _ in range(3):
            async with session.get(f"{front.url}/v1/echo") as resp:
                assert resp.status == 200


async def test_websocket_upgrades_are_refused_clearly():
    async with Front(upstream_port=9) as front, aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.WSServerHandshakeError) as caught:
            await session.ws_connect(f"{front.url}/v1/ws/completions")
        assert caught.value.status == 503


async def test_health_ready_and_dns():
    async with Front(upstream_port=9) as front, aiohttp.ClientSession() as session:
        for path in ("/health", "/ready"):
            async with session.get(front.url + path) as resp:
                assert resp.status == 200
    assert "127.0.0.1" in await resolve_dns("localhost")
    assert await resolve_dns("no-such-host.invalid") == []


def test_the_cli_refuses_bad_flags():
    from kubellm.operator.activator.cli import main

    with pytest.raises(SystemExit, match="--hold-timeout-seconds must be > 0"):
        main(["--upstream", "x", "--served-model-name", "m", "--hold-timeout-seconds", "0"])
