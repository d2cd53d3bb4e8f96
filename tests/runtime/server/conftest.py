"""A real front end (uvicorn on a free loopback port, in a thread of the test process) in
front of a real engine core process with the session's tiny model — the same two halves
`kubellm serve` runs. One server per test module: model loading and warm-up dominate the
cost of a test."""
from __future__ import annotations

import socket
import threading
import time

import httpx
import pytest

from kubellm.runtime.config import EngineConfig
from kubellm.runtime.server.config import ServerConfig

# Small enough that a burst queues (waiting > 0) and that CPU steps stay quick.
ENGINE_FIELDS = dict(max_model_len=256, num_kv_blocks=256, block_size=16, max_num_seqs=32,
                     max_num_batched_tokens=512, device="cpu", dtype="float32")
SERVED_NAME = "tiny"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerThread:
    """kubellm's front end under a real uvicorn server in a background thread, talking to
    a real engine core process (``engine_factory`` builds a wrapped engine there)."""

    def __init__(self, model_dir: str, engine_fields: dict | None = None,
                 engine_factory: str | None = None, **server_fields):
        import uvicorn

        from kubellm.runtime.engine_core.client import EngineCoreClient
        from kubellm.runtime.engine_core.launch import start_engine_core
        from kubellm.runtime.server.app import build_app
        from kubellm.runtime.server.frontend import load_tokenizer
        from kubellm.runtime.server.lifecycle import uvicorn_config

        self.engine_config = EngineConfig(model=model_dir,
                                          **{**ENGINE_FIELDS, **(engine_fields or {})})
        self.core = start_engine_core(self.engine_config, 1, engine_factory)
        self.config = ServerConfig(host="127.0.0.1", port=free_port(),
                                   served_model_name=SERVED_NAME, uvicorn_log_level="warning",
                                   **server_fields)
        tokenizer = load_tokenizer(self.core.info)
        self.client = EngineCoreClient(self.core.info, self.core.ipc_dir, 0, tokenizer)
        self.app = build_app(self.client, tokenizer, self.core.info, self.config)
        self.server = uvicorn.Server(uvicorn_config(self.app, self.config))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.url = f"http://127.0.0.1:{self.config.port}"

    @property
    def state(self):
        return self.app.state.kubellm

    @property
    def stats(self):
        return self.client.stats

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 60
        while not (self.server.started and self.client.is_connected):
            if time.monotonic() > deadline or not self.thread.is_alive():
                self.core.terminate()
                raise RuntimeError("server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(30)
        self.core.terminate()
        self.core.close()

    def wait_idle(self, timeout: float = 10.0) -> None:
        """Until the engine holds no request and every KV block is free, by its stats."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            stats = self.client.stats
            if (stats is not None and not self.client.num_requests
                    and stats.num_running == 0 and stats.num_waiting == 0
                    and stats.num_free_blocks == stats.num_total_blocks):
                return
            time.sleep(0.02)
        raise AssertionError(f"engine not idle after {timeout}s: {self.client.stats}")


def metric_value(text: str, name: str, labels: str | None = None) -> float:
    """One sample from Prometheus exposition text (first match of name and label text)."""
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            if labels is None or labels in line:
                return float(line.rsplit(" ", 1)[1])
    raise KeyError(f"{name} {labels or ''} not in /metrics")


def scrape(url: str) -> str:
    return httpx.get(url + "/metrics", timeout=10).text


@pytest.fixture(scope="module")
def server(tiny_model_dir):
    with ServerThread(tiny_model_dir) as srv:
        yield srv
