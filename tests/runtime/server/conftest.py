"""A real uvicorn server on a free loopback port, in a thread of the test process, around
a real engine with the session's tiny model. One server per test module: model loading
and warm-up dominate the cost of a test."""
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
    """kubellm's app under a real uvicorn server, run in a background thread."""

    def __init__(self, model_dir: str, engine_fields: dict | None = None, **server_fields):
        import uvicorn

        from kubellm.runtime.engine.llm_engine import LLMEngine
        from kubellm.runtime.server.app import build_app
        from kubellm.runtime.server.lifecycle import uvicorn_config

        self.engine = LLMEngine.from_config(
            EngineConfig(model=model_dir, **{**ENGINE_FIELDS, **(engine_fields or {})}))
        self.config = ServerConfig(host="127.0.0.1", port=free_port(),
                                   served_model_name=SERVED_NAME, uvicorn_log_level="warning",
                                   **server_fields)
        self.app = build_app(self.engine, self.config)
        self.server = uvicorn.Server(uvicorn_config(self.app, self.config))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.url = f"http://127.0.0.1:{self.config.port}"

    @property
    def state(self):
        return self.app.state.kubellm

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(30)

    def wait_idle(self, timeout: float = 10.0) -> None:
        """Until the engine holds no request and its stats say so."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            stats = self.state.async_engine.stats
            if (not self.state.async_engine._live and stats is not None
                    and stats.num_running == 0 and stats.num_waiting == 0):
                return
            time.sleep(0.02)
        raise AssertionError(f"engine not idle after {timeout}s: {self.state.async_engine.stats}")


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
