"""The serving benchmark's HTTP client: one pool of keep-alive connections for the whole
run, opened before each timed load.

Measured on the H200 (2026-12-02, 64 requests all at once, 4 API servers): with a new
client session per load, the first request body reached an API server 15.8 ms after the
load began, time spent opening 64 TCP connections inside the timed window. A gateway or a
pooled client sends on connections it already holds, so before a load ``open_connections``
brings the pool to the load's size (concurrent GET /health, outside the timing) and the
load's requests reuse them. The server closes idle connections after uvicorn's keep-alive
timeout (5 s), so they are opened right before each load, not once.

aiohttp is the default: measured on the 2-core CPU machine against a server that only
writes SSE, it read 512 streams of 128 events with 15 µs of client CPU per event where
httpx took 33-40 µs, and on the H200 512 streams deliver ~14k events/s, which httpx's
client could not keep up with.
"""
from __future__ import annotations

import asyncio
import json
import time

KEEP_ALIVE_S = 60.0   # the client's side; the server's (5 s) is the one that bites
JSON = {"Content-Type": "application/json"}


class StreamTimer:
    """One streamed completion's timings, fed the response's lines. Only the rare events
    are parsed: with 512 streams the client must keep up with the server."""

    def __init__(self, sample):
        self.sample = sample
        self.start = self.last = time.perf_counter()

    def line(self, line: str) -> bool:
        """False once the stream reported an error."""
        if not line.startswith("data: {"):
            return True
        now = time.perf_counter()
        if line.startswith('data: {"error"'):
            self.sample.error = line[6:206]
            return False
        if '"usage":{' in line:
            self.sample.num_output_tokens = json.loads(line[6:])["usage"]["completion_tokens"]
            return True
        if self.sample.ttft is None:
            self.sample.ttft = now - self.start
        else:
            self.sample.gaps.append(now - self.last)
        self.last = now
        return True

    def done(self):
        self.sample.latency = self.last - self.start
        return self.sample


def completion_body(prompt: list[int], output_len: int, model: str) -> dict:
    return {"model": model, "prompt": prompt, "max_tokens": output_len,
            "ignore_eos": True, "temperature": 0.0, "stream": True,
            "stream_options": {"include_usage": True}}


class PooledClient:
    """``async with PooledClient(...) as client``: ``await client.open_connections(n)``,
    then ``await client.complete(prompt)`` per request, each returning a Sample."""

    def __init__(self, url: str, api_key: str | None, kind: str, max_connections: int,
                 output_len: int, model: str, new_sample):
        if kind not in ("aiohttp", "httpx"):
            raise ValueError(f"http client must be aiohttp or httpx, got {kind!r}")
        self.url, self.kind, self.max_connections = url, kind, max_connections
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.output_len, self.model, self.new_sample = output_len, model, new_sample
        self._client = None

    async def __aenter__(self):
        if self.kind == "httpx":
            import httpx
            limits = httpx.Limits(max_connections=self.max_connections,
                                  max_keepalive_connections=self.max_connections,
                                  keepalive_expiry=KEEP_ALIVE_S)
            self._client = httpx.AsyncClient(base_url=self.url, headers=self.headers,
                                             limits=limits, timeout=httpx.Timeout(600.0))
        else:
            import aiohttp
            connector = aiohttp.TCPConnector(limit=self.max_connections,
                                             keepalive_timeout=KEEP_ALIVE_S)
            self._client = aiohttp.ClientSession(base_url=self.url, headers=self.headers,
                                                 connector=connector,
                                                 timeout=aiohttp.ClientTimeout(total=600.0))
        return self

    async def __aexit__(self, *exc) -> None:
        if self.kind == "httpx":
            await self._client.aclose()
        else:
            await self._client.close()

    async def open_connections(self, num: int) -> None:
        """``num`` concurrent GET /health: each needs a connection of its own, and all go
        back to the pool when answered (a failed probe is the load's problem to report)."""
        num = min(num, self.max_connections)
        await asyncio.gather(*(self._probe() for _ in range(num)), return_exceptions=True)

    async def _probe(self) -> None:
        if self.kind == "httpx":
            (await self._client.get("/health")).read()
        else:
            async with self._client.get("/health") as r:
                await r.read()

    def encode(self, prompt: list[int]) -> bytes:
        """The request body, built before a load so that its JSON encoding (a 512-token
        prompt is ~3 KB) is not the client's work inside the timed window."""
        return json.dumps(completion_body(prompt, self.output_len, self.model),
                          separators=(",", ":")).encode()

    async def complete(self, prompt: list[int] | bytes):
        """One streamed completion; ``prompt`` as token ids or as ``encode``'s body."""
        timer = StreamTimer(self.new_sample())
        body = prompt if isinstance(prompt, bytes) else self.encode(prompt)
        try:
            if self.kind == "httpx":
                await self._httpx_stream(body, timer)
            else:
                await self._aiohttp_stream(body, timer)
        except Exception as exc:  # a failed request is counted, not fatal
            timer.sample.error = f"{type(exc).__name__}: {exc}"
        if timer.sample.error:
            return timer.sample
        return timer.done()

    async def _aiohttp_stream(self, body: bytes, timer: StreamTimer) -> None:
        async with self._client.post("/v1/completions", data=body, headers=JSON) as r:
            if r.status != 200:
                timer.sample.error = f"HTTP {r.status}: {(await r.read())[:200]!r}"
                return
            async for raw in r.content:   # one SSE line per item
                if not timer.line(raw.decode()):
                    return

    async def _httpx_stream(self, body: bytes, timer: StreamTimer) -> None:
        async with self._client.stream("POST", "/v1/completions", content=body,
                                       headers=JSON) as r:
            if r.status_code != 200:
                timer.sample.error = f"HTTP {r.status_code}: {(await r.aread())[:200]!r}"
                return
            async for line in r.aiter_lines():
                if not timer.line(line):
                    return
