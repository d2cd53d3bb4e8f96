"""SIGTERM on a real ``kubellm serve`` process (supervisor, front end, engine core): /ready
turns 503 at once, new requests get 503, requests in flight finish, every process exits
0; past --shutdown-timeout, what still runs ends in a way a client can act on — 503 +
Retry-After, or mid-stream an error event with code service_unavailable, then [DONE] —
and the exit is still 0."""
from __future__ import annotations

import json
import signal
import threading
import time

import httpx
import pytest

from tests.runtime.server.conftest import metric_value, scrape
from tests.runtime.server.serve_process import serve  # noqa: F401  (the fixture)

MAX_TOKENS = 900  # seconds of generation on CPU: still running when SIGTERM arrives
DRAINED_TOKENS = 300  # what the drained streams finish (well within the drain's timeout)


def start_streams(url: str, count: int, max_tokens: int = MAX_TOKENS
                  ) -> tuple[list[threading.Thread], list, threading.Barrier]:
    """Streams that each report (finish_reason, completion_tokens, error) when done;
    the barrier trips once every stream has its first token (admitted and running)."""
    results, first_tokens = [], threading.Barrier(count + 1, timeout=120)

    def run():
        reason, usage, error, seen_first, done_after_error = None, None, None, False, False
        body = {"prompt": "Count:", "max_tokens": max_tokens, "ignore_eos": True,
                "stream": True, "stream_options": {"include_usage": True}}
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=600) as r:
            for line in r.iter_lines():
                if line == "data: [DONE]":
                    done_after_error = error is not None
                if not line.startswith("data: {"):
                    continue
                data = json.loads(line[6:])
                if "error" in data:
                    error = data["error"]
                elif data.get("usage"):
                    usage = data["usage"]["completion_tokens"]
                elif data["choices"]:
                    reason = data["choices"][0]["finish_reason"] or reason
                    if not seen_first:
                        seen_first = True
                        first_tokens.wait()
        results.append((reason, usage, error, done_after_error))

    threads = [threading.Thread(target=run) for _ in range(count)]
    for t in threads:
        t.start()
    return threads, results, first_tokens


def test_sigterm_drains_in_flight_requests(serve):
    # a drain as long as the machine needs: the test must not depend on its speed
    server = serve("--shutdown-timeout", "600")
    threads, results, first_tokens = start_streams(server.url, 4, DRAINED_TOKENS)
    first_tokens.wait()
    server.proc.send_signal(signal.SIGTERM)

    deadline = time.monotonic() + 60   # generous: a loaded CI machine is slow, not wrong
    while httpx.get(server.url + "/ready").status_code != 503:
        assert time.monotonic() < deadline, "/ready still 200 after SIGTERM"
        time.sleep(0.01)
    assert httpx.get(server.url + "/health").status_code == 200  # alive while draining
    late = httpx.post(server.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 2})
    assert late.status_code == 503 and late.headers["Retry-After"]
    assert late.json()["error"]["code"] == "service_unavailable"
    assert server.proc.poll() is None  # still finishing the streams

    for t in threads:
        t.join(600)
    assert results == [("length", DRAINED_TOKENS, None, False)] * 4
    assert server.proc.wait(30) == 0, server.output()


def test_shutdown_timeout_ends_the_rest_with_503(serve):
    server = serve("--shutdown-timeout", "0.5")
    threads, results, first_tokens = start_streams(server.url, 2)
    waiting = []
    plain = threading.Thread(target=lambda: waiting.append(httpx.post(
        server.url + "/v1/completions", timeout=120,
        json={"prompt": "Count:", "max_tokens": MAX_TOKENS, "ignore_eos": True})))
    plain.start()
    first_tokens.wait()
    deadline = time.monotonic() + 60
    while metric_value(scrape(server.url), "vllm:num_requests_running") < 3:
        assert time.monotonic() < deadline, "the non-streaming request never started"
        time.sleep(0.05)
    server.proc.send_signal(signal.SIGTERM)
    for t in [*threads, plain]:
        t.join(60)
    assert server.proc.wait(30) == 0, server.output()
    assert len(results) == 2
    for reason, usage, error, done_after_error in results:
        assert reason is None and usage is None  # cut short: never finished
        assert error["code"] == "service_unavailable" and "shutting down" in error["message"]
        assert done_after_error, "the stream did not end with [DONE] after its error"
    [r] = waiting
    assert r.status_code == 503 and r.headers["Retry-After"].isdigit()
    assert r.json()["error"]["code"] == "service_unavailable"
