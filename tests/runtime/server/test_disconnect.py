"""A client that leaves (streaming, non-streaming, WebSocket) aborts its request: the
engine stops generating for it and the KV block pool returns to fully free."""
from __future__ import annotations

import json
import time

import httpx
import pytest
import websockets.sync.client

from tests.runtime.server.conftest import ServerThread, metric_value, scrape

MAX_TOKENS = 900  # seconds of work on CPU: far longer than the test waits
LONG = {"prompt": "Once upon a time", "max_tokens": MAX_TOKENS, "ignore_eos": True,
        "temperature": 0}


@pytest.fixture(scope="module")
def server(tiny_model_dir):
    with ServerThread(tiny_model_dir, engine_fields=dict(max_model_len=1024)) as srv:
        yield srv


def generated_tokens(text: str) -> float:
    return metric_value(text, "vllm:generation_tokens_total")


def wait_pool_free(url: str, timeout: float = 5.0) -> str:
    """Polls /metrics until no request runs or waits and every KV block is free."""
    deadline = time.monotonic() + timeout
    while True:
        text = scrape(url)
        free = metric_value(text, "kubellm:num_free_kv_blocks")
        total = metric_value(text, "kubellm:num_kv_blocks")
        running = metric_value(text, "vllm:num_requests_running")
        waiting = metric_value(text, "vllm:num_requests_waiting")
        if free == total and running == 0 and waiting == 0:
            assert metric_value(text, "vllm:kv_cache_usage_perc") == 0.0
            return text
        assert time.monotonic() < deadline, f"pool not free: {free}/{total}, {running} running"
        time.sleep(0.01)


def aborts(text: str) -> float:
    try:
        return metric_value(text, "vllm:request_success_total", 'finished_reason="abort"')
    except KeyError:
        return 0.0


def check_aborted(server, before: str) -> None:
    after = wait_pool_free(server.url)
    assert generated_tokens(after) - generated_tokens(before) < MAX_TOKENS / 2
    assert aborts(after) == aborts(before) + 1
    server.wait_idle()  # the engine core holds nothing either, by its own stats


def test_stream_dropped_half_way(server):
    before = wait_pool_free(server.url)
    with httpx.Client(timeout=30) as client:
        with client.stream("POST", server.url + "/v1/completions",
                           json={**LONG, "stream": True}) as r:
            assert r.status_code == 200
            events = 0
            for line in r.iter_lines():
                events += line.startswith("data: ")
                if events == 5:
                    text = scrape(server.url)  # mid-generation: the pool is in use
                    assert metric_value(text, "vllm:num_requests_running") == 1
                    assert metric_value(text, "kubellm:num_free_kv_blocks") < \
                        metric_value(text, "kubellm:num_kv_blocks")
                    break  # leaving iter_lines early closes the connection: the drop
    check_aborted(server, before)


def test_non_streaming_client_times_out(server):
    before = wait_pool_free(server.url)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server.url + "/v1/chat/completions", timeout=httpx.Timeout(30, read=0.5),
                   json={"messages": [{"role": "user", "content": "Tell a story"}],
                         **{k: v for k, v in LONG.items() if k != "prompt"}})
    check_aborted(server, before)


def test_websocket_closed_mid_stream(server):
    before = wait_pool_free(server.url)
    url = server.url.replace("http://", "ws://") + "/v1/ws/completions"
    with websockets.sync.client.connect(url) as ws:
        ws.send(json.dumps(LONG))
        for _ in range(5):
            assert "text" in json.loads(ws.recv(timeout=30))
    check_aborted(server, before)
