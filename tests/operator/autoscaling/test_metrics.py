"""Scraping /metrics: parsing, pod selection, and unknown pods against real servers."""
import asyncio

import aiohttp.web
import pytest

from kubellm.operator.autoscaling.metrics import (PodLoad, metrics_url, parse_load,
                                                  scrape_fleet, to_sample)

PAGE = """# HELP vllm:num_requests_waiting Requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="a"} 3.0
vllm:num_requests_waiting{model_name="b, \\"quoted\\" }"} 2
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="a"} 7 1700000000000
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="a"} 0.5
"""


def test_label_variants_are_summed():
    assert parse_load(PAGE) == PodLoad(waiting=5.0, running=7.0)


@pytest.mark.parametrize("text", [
    "vllm:num_requests_waiting 1\n",                       # running missing
    "vllm:num_requests_running 1\n",                       # waiting missing
    "vllm:num_requests_waiting NaN\nvllm:num_requests_running 1\n",
    "vllm:num_requests_waiting -1\nvllm:num_requests_running 1\n",
    "<html>not metrics</html>",
    "",
])
def test_pages_without_a_usable_queue_are_unknown(text):
    assert parse_load(text) is None


def pod(ip="10.0.0.7", port=8000, ready="True", **extra):
    return {"metadata": {"name": "p", **extra.get("metadata", {})},
            "spec": {"containers": [{"name": "server", "ports": [{"containerPort": port}]},
                                    {"name": "sidecar", "ports": [{"containerPort": 9}]}]},
            "status": {"phase": extra.get("phase", "Running"), "podIP": ip,
                       "conditions": [{"type": "Ready", "status": ready}]}}


def test_metrics_url_of_ready_pods_only():
    assert metrics_url(pod()) == "http://10.0.0.7:8000/metrics"
    assert metrics_url(pod(ip="fd00::7")) == "http://[fd00::7]:8000/metrics"
    assert metrics_url(pod(ready="False")) is None
    assert metrics_url(pod(ip=None)) is None
    assert metrics_url(pod(phase="Pending")) is None
    assert metrics_url(pod(metadata={"deletionTimestamp": "2026-01-01T00:00:00Z"})) is None
    assert metrics_url({"metadata": {}, "spec": {"containers": [{"name": "x"}]},
                        "status": {"podIP": "1.2.3.4",
                                   "conditions": [{"type": "Ready", "status": "True"}]}}) is None


async def serve(handler):
    app = aiohttp.web.Application()
    app.router.add_get("/metrics", handler)
    # A short shutdown_timeout: cleanup must not wait for the deliberately slow handler.
    runner = aiohttp.web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    await aiohttp.web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}/metrics"


async def test_scrape_marks_silent_slow_and_broken_pods_unknown():
    async def good(_):
        return aiohttp.web.Response(text=PAGE)

    async def slow(_):
        await asyncio.sleep(3)
        return aiohttp.web.Response(text=PAGE)

    async def error(_):
        return aiohttp.web.Response(status=503, text=PAGE)

    runners, urls = [], []
    for handler in (good, slow, error):
        runner, url = await serve(handler)
        runners.append(runner)
        urls.append(url)
    # A port nobody listens on: connection refused.
    closed_runner, closed_url = await serve(good)
    await closed_runner.cleanup()
    try:
        loop = asyncio.get_running_loop()
        started = loop.time()
        loads = await scrape_fleet(urls + [closed_url], timeout=0.5)
        assert loop.time() - started < 2            # concurrent, bounded by the timeout
        assert loads == [PodLoad(5.0, 7.0), None, None, None]
    finally:
        for runner in runners:
            await runner.cleanup()


def test_sample_counts_unknown_pods_as_ready_not_answered():
    s = to_sample([PodLoad(6, 16), None, PodLoad(0, 3)], time=10.0, replicas=4)
    assert (s.waiting, s.running, s.num_answered, s.num_ready, s.replicas) == (6, 19, 2, 3, 4)
    assert s.saturated_running == 16          # only the pod with a queue shows capacity
    assert s.fleet_waiting == pytest.approx(9.0)   # 6 over 2 answering pods, times 3 ready
    assert to_sample([None, None], 0.0, 2).is_known is False
