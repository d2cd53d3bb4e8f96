"""The process split of ``kubellm serve``: supervisor, engine core, API servers.

A killed engine core or front end fails loudly — requests in flight end with 503 (or an
error event with code service_unavailable, then [DONE]) and the server exits non-zero, so
the pod restarts; a killed supervisor takes every process with it; two API servers share
the port, and whichever one a scrape reaches reports the metrics of both."""
from __future__ import annotations

import json
import os
import signal
import threading
import time

import httpx

from tests.runtime.server.conftest import metric_value
from tests.runtime.server.serve_process import serve  # noqa: F401  (the fixture)

LONG = {"prompt": "Count:", "max_tokens": 900, "ignore_eos": True}


def is_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        with open(f"/proc/{pid}/stat") as f:  # a zombie is gone for our purpose
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (ProcessLookupError, FileNotFoundError):
        # gone, possibly between the signal and the read (its reaper was quicker: the
        # read then fails with ESRCH, as a CI run on 2026-12-04 saw)
        return False


def wait_gone(pids: list[int], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while any(is_running(pid) for pid in pids):
        assert time.monotonic() < deadline, f"still running: {[p for p in pids if is_running(p)]}"
        time.sleep(0.1)


def stream_events(url: str, first_token: threading.Event, events: list) -> None:
    with httpx.stream("POST", url + "/v1/completions", json={**LONG, "stream": True},
                      timeout=120) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(line[6:])
                first_token.set()


def test_killed_core_ends_requests_with_503_and_the_server_exits_non_zero(serve):
    server = serve()
    core, frontend = server.pid_of("core"), server.pid_of("0")
    first_token, events = threading.Event(), []
    streamer = threading.Thread(target=stream_events, args=(server.url, first_token, events))
    streamer.start()
    assert first_token.wait(120)
    os.kill(core, signal.SIGKILL)
    streamer.join(120)
    assert events[-1] == "[DONE]"
    error = json.loads(events[-2])["error"]
    assert error["code"] == "service_unavailable", error
    assert server.proc.wait(60) == 1, server.output()
    assert "engine core" in server.output() and "SIGKILL" in server.output()
    wait_gone([frontend])


def test_two_api_servers_share_the_port_and_the_metrics(serve):
    server = serve("--api-server-count", "2")
    frontends = [server.pid_of("0"), server.pid_of("1")]
    num_requests = 16
    for _ in range(num_requests):  # a new connection each: the kernel spreads them
        r = httpx.post(server.url + "/v1/completions",
                       json={"prompt": "Hi", "max_tokens": 3, "ignore_eos": True}, timeout=60)
        assert r.status_code == 200, r.text
    for _ in range(8):  # every scrape, wherever it lands, counts all of them
        text = httpx.get(server.url + "/metrics", timeout=30).text
        assert metric_value(text, "vllm:request_success_total",
                            'finished_reason="length"') == num_requests
        assert metric_value(text, "vllm:e2e_request_latency_seconds_count") == num_requests
        assert metric_value(text, "vllm:generation_tokens_total") == 3 * num_requests
        # issue 15's per-request series: token counts from the outputs, prefill/decode
        # times from the engine core's timestamps, summed over both front ends too
        assert metric_value(text, "vllm:request_generation_tokens_sum") == 3 * num_requests
        for name in ("vllm:request_prompt_tokens", "vllm:request_params_n",
                     "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds",
                     "vllm:request_queue_time_seconds"):
            assert metric_value(text, name + "_count") == num_requests, name
        assert metric_value(text, "vllm:iteration_tokens_total_count") > 0
        assert metric_value(text, "vllm:cache_config_info", 'block_size="') == 1
    # a front end that dies stops the whole server (the pod restarts)
    core = server.pid_of("core")
    os.kill(frontends[1], signal.SIGKILL)
    assert server.proc.wait(120) == 1, server.output()
    assert "API server kubellm-api-server-1" in server.output()
    wait_gone([core, frontends[0]])


def test_killed_supervisor_takes_every_process_with_it(serve):
    server = serve()
    children = [server.pid_of("core"), server.pid_of("0")]
    server.proc.kill()
    server.proc.wait(10)
    wait_gone(children)
