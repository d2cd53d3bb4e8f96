"""A failure is the engine's, not the process's (in this test process, next to others):
a killed worker fails its engine's requests with an error naming it, a single-process
engine in the same process keeps working, and the process can start another multi-process
engine; a hung rank misses the heartbeat and is named; a server over a dead engine ends
its requests in flight with 503 naming the rank, turns unready, refuses new work, and its
engine core process exits 1.

Deadlines poll at most 30 s: a dead worker is seen within a watchdog poll (0.2 s) or a
heartbeat round (1 s); the margin is for a loaded CI machine, not what is measured.
"""
from __future__ import annotations

import json
import re
import os
import signal
import threading
import time

import httpx
import pytest
import torch.distributed as dist

from kubellm.runtime import LLM, SamplingParams
from kubellm.runtime.core.errors import EngineDeadError
from tests.runtime.distributed.conftest import DIST_ENV
from tests.runtime.distributed.test_worker_failure import _is_gone, _wait_for, _workers
from tests.runtime.server.conftest import ServerThread

NOTICED_WITHIN_S = 30
PROMPTS = [[1000 + i, 1001 + i, 1002 + i, 1003 + i] for i in range(3)]
PARAMS = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
ENGINE = dict(dtype="float32", device="cpu", block_size=4, num_kv_blocks=64,
              max_model_len=128)


@pytest.fixture
def dist_env(monkeypatch):
    for key, value in DIST_ENV.items():
        monkeypatch.setenv(key, value)


def _tokens(outputs) -> list[list[int]]:
    return [o.outputs[0].token_ids for o in outputs]


def _names_rank_1(message: str) -> bool:
    """Who noticed first names the rank: the watchdog ("worker rank 1 ... SIGKILL") or,
    on a loaded machine, the heartbeat round ("Ranks 1 failed to pass monitoredBarrier")."""
    return re.search(r"\b[Rr]anks? 1\b", message) is not None


def _worker(engine) -> int:
    [pid] = engine.executor.supervisor.pids.values()
    return pid


def test_a_dead_worker_fails_its_engine_only(tiny_model_dir, dist_env):
    other = LLM(tiny_model_dir, **ENGINE)  # single-process, in the same process
    expected = _tokens(other.generate(PROMPTS, PARAMS))
    llm = LLM(tiny_model_dir, **ENGINE, tensor_parallel_size=2)
    try:
        assert _tokens(llm.generate(PROMPTS, PARAMS)) == expected
        engine, noticed = llm.engine, []
        engine.add_dead_callback(noticed.append)
        for i, prompt in enumerate(PROMPTS):
            engine.add_request(f"r{i}", prompt, PARAMS.clone(max_tokens=100))
        engine.step()
        os.kill(_worker(engine), signal.SIGKILL)
        deadline = time.monotonic() + NOTICED_WITHIN_S
        with pytest.raises(EngineDeadError) as failed:
            while time.monotonic() < deadline:
                engine.step()
        message = str(failed.value)
        assert "worker rank 1" in message and "signal SIGKILL" in message, message
        assert engine.errored
        # the callbacks run on the thread that noticed (lifecycle.py), which may still be
        # stopping the ranks when this thread sees the engine dead: wait for them
        while not noticed and time.monotonic() < deadline + NOTICED_WITHIN_S:
            time.sleep(0.05)
        assert noticed == [engine.dead_error]
        with pytest.raises(EngineDeadError, match="worker rank 1"):
            llm.generate(PROMPTS, PARAMS)
        assert _tokens(other.generate(PROMPTS, PARAMS)) == expected  # untouched
        llm.shutdown()
        assert not dist.is_initialized()
        with LLM(tiny_model_dir, **ENGINE, tensor_parallel_size=2) as again:
            assert _tokens(again.generate(PROMPTS, PARAMS)) == expected
    finally:
        llm.shutdown()


def test_a_hung_rank_misses_the_heartbeat(tiny_model_dir, dist_env, monkeypatch):
    """No traffic, and the worker's process is still there (stopped): only the heartbeat
    can tell, after KUBELLM_HEARTBEAT_TIMEOUT_S, and rank 0 names the rank."""
    monkeypatch.setenv("KUBELLM_HEARTBEAT_TIMEOUT_S", "5")
    llm = LLM(tiny_model_dir, **ENGINE, tensor_parallel_size=2)
    worker = _worker(llm.engine)
    try:
        _wait_for(lambda: llm.engine.executor.heartbeat.rounds > 1, NOTICED_WITHIN_S,
                  "heartbeat rounds")
        assert not llm.engine.errored
        os.kill(worker, signal.SIGSTOP)
        _wait_for(lambda: llm.engine.errored, NOTICED_WITHIN_S, "the engine to fail")
        message = str(llm.engine.dead_error)
        assert "lost a rank" in message and "Ranks 1 failed to pass" in message, message
        _wait_for(lambda: _is_gone(worker), NOTICED_WITHIN_S, "the hung worker to be killed")
    finally:
        llm.shutdown()
        if not _is_gone(worker):
            os.kill(worker, signal.SIGKILL)


def test_a_dead_engine_answers_503_and_turns_unready(tiny_model_dir, dist_env):
    with ServerThread(tiny_model_dir, {"tensor_parallel_size": 2}) as server:
        body = {"model": "tiny", "prompt": "Once upon a time", "max_tokens": 200,
                "ignore_eos": True}
        first_chunk, events, answers = threading.Event(), [], []

        def stream():
            with httpx.stream("POST", server.url + "/v1/completions", timeout=60,
                              json={**body, "stream": True}) as response:
                for line in response.iter_lines():
                    if line.startswith("data: {"):
                        first_chunk.set()
                        events.append(json.loads(line.removeprefix("data: ")))

        def whole():
            answers.append(httpx.post(server.url + "/v1/completions", json=body,
                                      timeout=60))
        clients = [threading.Thread(target=f, daemon=True) for f in (stream, whole)]
        for client in clients:
            client.start()
        assert first_chunk.wait(60)
        _wait_for(lambda: server.stats is not None and server.stats.num_running == 2, 30,
                  "both requests to run")
        [worker] = _workers(server.core.process.pid).values()  # the engine core's rank
        os.kill(worker, signal.SIGKILL)
        for client in clients:
            client.join(NOTICED_WITHIN_S)
        [answer] = answers
        assert answer.status_code == 503 and answer.headers["Retry-After"]
        assert _names_rank_1(answer.json()["error"]["message"])
        error = events[-1]["error"]
        assert error["code"] == "service_unavailable" and _names_rank_1(error["message"])
        server.core.process.join(NOTICED_WITHIN_S)
        assert server.core.process.exitcode == 1
        _wait_for(lambda: httpx.get(server.url + "/ready").status_code == 503, 30,
                  "/ready to turn 503")
        assert httpx.get(server.url + "/health").status_code == 503
        refused = httpx.post(server.url + "/v1/completions", json=body, timeout=30)
        assert refused.status_code == 503
