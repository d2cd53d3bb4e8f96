"""SIGTERM on a real ``kubellm serve`` process: /ready turns 503 at once, new requests get
503, requests in flight finish, the process exits 0; past --shutdown-timeout, what is
still running is aborted and the exit is still 0."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

import httpx
import pytest

from tests.runtime.server.conftest import free_port

MAX_TOKENS = 900  # seconds of generation on CPU: still running when SIGTERM arrives


class ServeProcess:
    def __init__(self, model_dir: str, *flags: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "kubellm.runtime", "serve", model_dir, "--host", "127.0.0.1",
               "--port", str(self.port), "--device", "cpu", "--max-model-len", "1024",
               "--num-kv-blocks", "256", "--uvicorn-log-level", "warning", *flags]
        self.log = tempfile.TemporaryFile(mode="w+")  # a pipe nobody reads could fill up
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, text=True,
                                     env={**os.environ, "KUBELLM_API_KEY": ""})

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.output()
            try:
                if httpx.get(self.url + "/ready", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise AssertionError("server never became ready")

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
def serve(tiny_model_dir):
    started = []

    def start(*flags):
        started.append(ServeProcess(tiny_model_dir, *flags))
        started[-1].wait_ready()
        return started[-1]
    yield start
    for process in started:
        process.kill()


def start_streams(url: str, count: int) -> tuple[list[threading.Thread], list, threading.Barrier]:
    """Streams that each report (finish_reason, completion_tokens, error) when done;
    the barrier trips once every stream has its first token (admitted and running)."""
    results, first_tokens = [], threading.Barrier(count + 1, timeout=60)

    def run():
        reason, usage, error, seen_first = None, None, None, False
        body = {"prompt": "Count:", "max_tokens": MAX_TOKENS, "ignore_eos": True,
                "stream": True, "stream_options": {"include_usage": True}}
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=120) as r:
            for line in r.iter_lines():
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
        results.append((reason, usage, error))

    threads = [threading.Thread(target=run) for _ in range(count)]
    for t in threads:
        t.start()
    return threads, results, first_tokens


def test_sigterm_drains_in_flight_requests(serve):
    server = serve("--shutdown-timeout", "60")
    threads, results, first_tokens = start_streams(server.url, 4)
    first_tokens.wait()
    server.proc.send_signal(signal.SIGTERM)

    deadline = time.monotonic() + 5
    while httpx.get(server.url + "/ready").status_code != 503:
        assert time.monotonic() < deadline, "/ready still 200 after SIGTERM"
        time.sleep(0.01)
    assert httpx.get(server.url + "/health").status_code == 200  # alive while draining
    late = httpx.post(server.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 2})
    assert late.status_code == 503 and late.headers["Retry-After"]
    assert late.json()["error"]["code"] == "service_unavailable"
    assert server.proc.poll() is None  # still finishing the streams

    for t in threads:
        t.join(120)
    assert results == [("length", MAX_TOKENS, None)] * 4
    assert server.proc.wait(30) == 0, server.output()


def test_shutdown_timeout_aborts_the_rest(serve):
    server = serve("--shutdown-timeout", "0.5")
    threads, results, first_tokens = start_streams(server.url, 2)
    first_tokens.wait()
    started = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    for t in threads:
        t.join(60)
    assert server.proc.wait(30) == 0, server.output()
    assert time.monotonic() - started < 15
    assert len(results) == 2
    for reason, usage, error in results:
        assert reason is None and usage is None  # cut short: never finished
        assert error is not None and "shutting down" in error["message"]
