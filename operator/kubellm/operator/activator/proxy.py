"""The activator's HTTP app: hold while no replica is ready, then forward, streamed.

- /health, /ready: the activator itself (always 200 once it listens);
- /metrics: vLLM's gauge names, so the autoscaler (and an Endpoint Picker, when the
  InferencePool points here) read it as a model server with a queue: held requests are
  ``vllm:num_requests_waiting``, forwarded ones in flight ``vllm:num_requests_running``;
  ``kubellm:activator_hold_seconds`` is the cold start as the requests saw it;
- anything else: held until a replica is ready (at most --hold-timeout-seconds, then 503
  in OpenAI's error shape with Retry-After), then sent there with its method, path,
  query, headers and body; the response streams back as it comes (SSE included). A
  replica that refuses the connection (it just went away) is skipped and the request
  held again; nothing is retried once the replica has accepted it.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from kubellm.operator.activator.upstream import Upstreams

HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
              "trailer", "transfer-encoding", "upgrade", "host", "content-length"}
HOLD_BUCKETS = (1, 5, 10, 30, 60, 120, 180, 300, 600, 900, 1800, 3600)
MAX_ATTEMPTS = 3  # replicas tried per request when connections are refused


@dataclass
class Activator:
    upstreams: Upstreams
    model_name: str
    hold_timeout: float
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    session: aiohttp.ClientSession | None = None

    def __post_init__(self) -> None:
        labels = ["model_name"]
        self.waiting = Gauge("vllm:num_requests_waiting", "requests held until a replica "
                             "is ready", labels, registry=self.registry)
        self.running = Gauge("vllm:num_requests_running", "requests forwarded, in flight",
                             labels, registry=self.registry)
        self.kv_usage = Gauge("vllm:kv_cache_usage_perc", "always 0: the activator holds "
                              "no KV cache", labels, registry=self.registry)
        self.hold = Histogram("kubellm:activator_hold_seconds", "how long a request was "
                              "held for a replica to be ready (the cold start it saw)",
                              labels, buckets=HOLD_BUCKETS, registry=self.registry)
        self.outcomes = Counter("kubellm:activator_requests", "requests by outcome",
                                labels + ["outcome"], registry=self.registry)
        # What an Endpoint Picker (>= v1.5) requires of every endpoint of the pool, which
        # the activator is while no replica is ready: no adapters, the time as the value.
        self.lora = Gauge("vllm:lora_requests_info", "LoRA adapters (none here)",
                          ["max_lora", "running_lora_adapters", "waiting_lora_adapters"],
                          registry=self.registry)
        self.lora.labels("0", "", "").set_function(time.time)
        for metric in (self.waiting, self.running, self.kv_usage, self.hold):
            metric.labels(self.model_name)
        for outcome in ("forwarded", "timeout", "upstream_error"):
            self.outcomes.labels(self.model_name, outcome)

    def app(self) -> web.Application:
        application = web.Application(client_max_size=64 << 20)
        application.router.add_get("/health", self._ok)
        application.router.add_get("/ready", self._ok)
        application.router.add_get("/metrics", self._metrics)
        application.router.add_route("*", "/{tail:.*}", self._forward)
        application.on_startup.append(self._start)
        application.on_cleanup.append(self._stop)
        return application

    async def _start(self, _: web.Application) -> None:
        # trust_env=False: pod IPs never go through a proxy from the environment.
        self.session = aiohttp.ClientSession(trust_env=False, auto_decompress=False,
                                             timeout=aiohttp.ClientTimeout(
                                                 total=None, sock_connect=5))
        await self.upstreams.refresh()
        self._refresher = asyncio.create_task(self.upstreams.run())

    async def _stop(self, _: web.Application) -> None:
        self._refresher.cancel()
        if self.session is not None:
            await self.session.close()

    async def _ok(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _metrics(self, _: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    def _error(self, status: int, message: str, code: str,
               retry_after: int | None = None) -> web.Response:
        body = {"error": {"message": message, "type": "service_unavailable", "param": None,
                          "code": code}}
        headers = {"Retry-After": str(retry_after)} if retry_after else None
        return web.json_response(body, status=status, headers=headers)

    async def _wait_for_replica(self) -> bool:
        if self.upstreams.addresses:
            return True
        started = time.monotonic()
        gauge = self.waiting.labels(self.model_name)
        gauge.inc()
        try:
            ready = await self.upstreams.wait(self.hold_timeout)
        finally:
            gauge.dec()
        if ready:
            self.hold.labels(self.model_name).observe(time.monotonic() - started)
        return ready

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("Upgrade"):
            return self._error(503, "WebSocket streams are not held while the model scales "
                                    "from zero; retry once it serves", "no_replica_ready", 30)
        body = await request.read()
        failed: set[str] = set()
        deadline = time.monotonic() + self.hold_timeout
        for _ in range(MAX_ATTEMPTS):
            if not await self._wait_for_replica() or time.monotonic() > deadline:
                self.outcomes.labels(self.model_name, "timeout").inc()
                return self._error(503, f"no replica of {self.model_name} became ready "
                                        f"within {self.hold_timeout:g}s",
                                   "no_replica_ready", 30)
            address = self.upstreams.pick(failed)
            if address is None:  # every known replica refused: look again
                failed.clear()
                await self.upstreams.refresh()
                continue
            try:
                return await self._send(request, body, address)
            except aiohttp.ClientConnectorError:
                failed.add(address)  # gone before it took the request: try another
        self.outcomes.labels(self.model_name, "upstream_error").inc()
        return self._error(503, "the replicas of this model refused the connection",
                           "upstream_unavailable", 5)

    async def _send(self, request: web.Request, body: bytes,
                    address: str) -> web.StreamResponse:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        url = self.upstreams.url(address, request.path_qs)
        running = self.running.labels(self.model_name)
        running.inc()
        try:
            async with self.session.request(request.method, url, headers=headers,
                                            data=body or None) as upstream:
                self.outcomes.labels(self.model_name, "forwarded").inc()
                response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
                for key, value in upstream.headers.items():
                    if key.lower() not in HOP_BY_HOP:
                        response.headers.add(key, value)
                await response.prepare(request)
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
                return response
        finally:
            running.dec()
