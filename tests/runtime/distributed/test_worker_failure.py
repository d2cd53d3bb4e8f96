"""A worker killed mid-run: the driver names the dead rank, stops the other ranks and exits
non-zero — promptly, never hanging in a collective."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.runtime.distributed.conftest import DIST_ENV
from tests.runtime.server.serve_process import ServeProcess

EXIT_WITHIN_S = 120  # a hang fails; a slow, loaded machine does not


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def _workers(pid: int) -> dict[int, int]:
    """Local rank -> pid of the worker processes ``pid`` started."""
    found = {}
    for child in _children(pid):
        env = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
        rank = next((v.split(b"=")[1] for v in env if v.startswith(b"KUBELLM_LOCAL_RANK=")),
                    None)
        if rank is not None:
            found[int(rank)] = child
    return found


def _is_gone(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):   # gone, also while being read
        return True
    return "State:\tZ" in status  # a zombie no longer runs anything


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_server_exits_nonzero_when_a_worker_dies(tiny_model_dir, monkeypatch):
    for key, value in DIST_ENV.items():
        monkeypatch.setenv(key, value)
    server = ServeProcess(tiny_model_dir, "--tensor-parallel-size", "2",
                          "--dtype", "float32")
    try:
        server.wait_ready()
        [worker] = _workers(server.pid_of("core")).values()  # the engine core's ranks
        first_chunk = threading.Event()

        def stream():
            body = {"model": "x", "prompt": "Once upon a time", "max_tokens": 500,
                    "ignore_eos": True, "stream": True}
            try:
                with httpx.stream("POST", server.url + "/v1/completions", json=body,
                                  timeout=60) as response:
                    for _ in response.iter_lines():
                        first_chunk.set()
            except httpx.HTTPError:
                pass  # the server goes away mid-stream: expected
        client = threading.Thread(target=stream, daemon=True)
        client.start()
        assert first_chunk.wait(180), server.output()
        os.kill(worker, signal.SIGKILL)
        code = server.proc.wait(EXIT_WITHIN_S)
        assert code != 0
        assert "worker rank 1" in server.output() and "signal SIGKILL" in server.output()
    finally:
        server.kill()


def test_generate_stops_every_rank_when_one_dies(tiny_model_factory, tmp_path):
    """PP = 3: rank 1 dies mid-generation; rank 2 must not be left behind."""
    trace = tmp_path / "trace"
    cmd = [sys.executable, "-m", "kubellm.runtime", "generate", "Once upon a time",
           "--model", tiny_model_factory("llama-4layers"), "--pipeline-parallel-size", "3",
           "--dtype", "float32", "--max-tokens", "900", "--ignore-eos",
           "--max-model-len", "1024", "--num-kv-blocks", "128"]
    driver = subprocess.Popen(cmd, env={**os.environ, **DIST_ENV,
                                        "KUBELLM_PIPELINE_TRACE": str(trace)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    workers: dict[int, int] = {}
    try:
        # decoding has begun once the last stage has recorded a few steps
        _wait_for(lambda: (trace / "rank2.jsonl").exists() and
                  len((trace / "rank2.jsonl").read_text().splitlines()) > 3,
                  120, "the pipeline to run")
        ranks = {json.loads((trace / f"rank{r}.jsonl").read_text().splitlines()[0])["rank"]
                 for r in (1, 2)}
        assert ranks == {1, 2}
        workers = _workers(driver.pid)
        assert set(workers) == {1, 2}
        os.kill(workers[1], signal.SIGKILL)
        _, stderr = driver.communicate(timeout=EXIT_WITHIN_S)
        assert driver.returncode != 0
        assert "worker rank 1" in stderr, stderr[-3000:]
        _wait_for(lambda: _is_gone(workers[2]), 10, "rank 2 to stop")
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        for pid in workers.values():  # only if the test failed before they were stopped
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


if sys.platform != "linux":  # /proc is how the tests find the worker processes
    pytestmark = pytest.mark.skip(reason="needs Linux /proc")
