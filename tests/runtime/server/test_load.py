"""200 concurrent streaming clients: all finish with the offline engine's texts, the queue
depth shows on /metrics during the burst and returns to zero, and no block leaks."""
from __future__ import annotations

import asyncio
import json

import httpx

from kubellm.runtime import LLM, SamplingParams
from tests.runtime.server.conftest import ENGINE_FIELDS, metric_value

NUM_CLIENTS = 200
PARAMS = dict(temperature=0.0, max_tokens=8)

# every metric DESIGN.md names, as exposed (counters with _total, histograms with _count)
DESIGN_METRICS = [
    "vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc",
    "vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:num_preemptions_total",
    "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
    "vllm:request_success_total", "vllm:time_to_first_token_seconds_count",
    "vllm:inter_token_latency_seconds_count", "vllm:e2e_request_latency_seconds_count"]


async def stream_one(client: httpx.AsyncClient, prompt: str) -> tuple[str, str]:
    text, reason = "", None
    async with client.stream("POST", "/v1/completions",
                             json={"prompt": prompt, "stream": True, **PARAMS}) as r:
        assert r.status_code == 200, await r.aread()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choice = json.loads(line[len("data: "):])["choices"][0]
            text += choice["text"]
            reason = choice["finish_reason"] or reason
    return text, reason


async def watch_queue(client: httpx.AsyncClient, seen: list[float], stop: asyncio.Event):
    while not stop.is_set():
        text = (await client.get("/metrics")).text
        seen.append(metric_value(text, "vllm:num_requests_waiting"))
        await asyncio.sleep(0.01)


async def test_200_concurrent_streams(server, tiny_model_dir):
    prompts = [f"Request {i} says that the weather" for i in range(NUM_CLIENTS)]
    limits = httpx.Limits(max_connections=NUM_CLIENTS + 10)
    before = (await asyncio.to_thread(httpx.get, server.url + "/metrics")).text
    async with httpx.AsyncClient(base_url=server.url, limits=limits, timeout=120) as client:
        seen: list[float] = []
        stop = asyncio.Event()
        watcher = asyncio.create_task(watch_queue(client, seen, stop))
        results = await asyncio.gather(*(stream_one(client, p) for p in prompts))
        stop.set()
        await watcher
        await asyncio.to_thread(server.wait_idle)
        after = (await client.get("/metrics")).text

    assert max(seen) > 0, "the burst never showed a queue on /metrics"
    assert metric_value(after, "vllm:num_requests_waiting") == 0
    assert metric_value(after, "vllm:num_requests_running") == 0
    assert metric_value(after, "kubellm:num_free_kv_blocks") == \
        metric_value(after, "kubellm:num_kv_blocks")
    for name in DESIGN_METRICS:
        metric_value(after, name)  # present (raises KeyError if not)
    for name in ("vllm:time_to_first_token_seconds_count",
                 "vllm:e2e_request_latency_seconds_count",
                 "vllm:request_queue_time_seconds_count"):
        assert metric_value(after, name) - metric_value(before, name) == NUM_CLIENTS

    offline = LLM(model=tiny_model_dir, **ENGINE_FIELDS)
    want = offline.generate(prompts, SamplingParams(**PARAMS))
    assert results == [(w.outputs[0].text, w.outputs[0].finish_reason) for w in want]
