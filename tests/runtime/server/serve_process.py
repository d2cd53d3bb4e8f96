"""``kubellm serve`` as a user starts it: a real process (supervisor, engine core, front
ends) on a free loopback port, its output in a file the test can read."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time

import httpx
import pytest

from tests.runtime.server.conftest import free_port


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

    def pid_of(self, what: str) -> int:
        """The pid the server logged for "the engine core" or "API server N"."""
        pattern = (r"engine core \(pid (\d+)\)" if what == "core"
                   else rf"API server {what} \(pid (\d+)\)")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            found = re.search(pattern, self.output())
            if found:
                return int(found.group(1))
            time.sleep(0.1)
        raise AssertionError(f"no pid logged for {what}: {self.output()[-2000:]}")

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
