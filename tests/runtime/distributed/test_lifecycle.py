"""Multi-process engines start, end and start again in one process, and never leave a
worker behind: not after shutdown()/with/del/interpreter exit, and not when their driver
is SIGKILLed (while the workers start, or mid-generation), when the workers must also let
go of the caller's stdout/stderr pipe.

Deadlines: a worker ends within milliseconds of its driver (the lifeline pipe) and its
engine's shutdown waits for it; the 30 s polling deadlines only absorb a loaded CI
machine (two cores shared by several test runs), they are not what is measured.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.runtime.distributed.conftest import DIST_ENV
from tests.runtime.distributed.test_worker_failure import _is_gone, _wait_for, _workers

JOB = Path(__file__).with_name("lifecycle_job.py")
GONE_WITHIN_S = 30


def test_layouts_one_after_another_in_one_process(tiny_model_factory, tmp_path):
    result_path = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, str(JOB), tiny_model_factory("llama-4layers"),
                           str(result_path)], env={**os.environ, **DIST_ENV},
                          capture_output=True, text=True, timeout=420)
    assert proc.returncode == 0, proc.stderr[-6000:]
    result = json.loads(result_path.read_text())
    tokens = result["tokens"]
    assert len(tokens) == 6 and all(t == tokens[0] for t in tokens)
    pids = result["pids"]
    assert [len(p) for p in pids] == [0, 1, 1, 3, 0, 1]
    assert "one multi-process engine at a time" in result["refused"]
    assert "shut the other down first" in result["refused"]
    # the last one was still running when the interpreter exited: ended by it
    _wait_for(lambda: all(_is_gone(p) for group in pids for p in group), GONE_WITHIN_S,
              "every worker to end")


def _drain(pipe, into: list) -> threading.Thread:
    def read():
        into.append(pipe.read())
    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("when", ["while-workers-start", "mid-generation"])
def test_workers_die_with_a_killed_driver(tiny_model_factory, tmp_path, when):
    trace = tmp_path / "trace"
    cmd = [sys.executable, "-m", "kubellm.runtime", "generate", "Once upon a time",
           "--model", tiny_model_factory("llama-4layers"), "--tensor-parallel-size", "2",
           "--pipeline-parallel-size", "2", "--dtype", "float32", "--max-tokens", "900",
           "--ignore-eos", "--max-model-len", "1024", "--num-kv-blocks", "128"]
    # the caller's pipes: whoever holds their write ends keeps the reader waiting
    driver = subprocess.Popen(cmd, env={**os.environ, **DIST_ENV,
                                        "KUBELLM_PIPELINE_TRACE": str(trace)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    workers: dict[int, int] = {}
    try:
        if when == "while-workers-start":  # still importing torch, long before any group
            _wait_for(lambda: len(_workers(driver.pid)) == 3, 60, "the workers to start")
        else:
            last = trace / "rank2.jsonl"
            _wait_for(lambda: last.exists() and len(last.read_text().splitlines()) > 3,
                      120, "the pipeline to run")
        workers = _workers(driver.pid)
        assert set(workers) == {1, 2, 3}
        driver.send_signal(signal.SIGKILL)
        outputs: list = []
        readers = [_drain(driver.stdout, outputs), _drain(driver.stderr, outputs)]
        for reader in readers:
            reader.join(GONE_WITHIN_S)
        assert not any(r.is_alive() for r in readers), "a worker kept the caller's pipe open"
        _wait_for(lambda: all(_is_gone(p) for p in workers.values()), GONE_WITHIN_S,
                  "every worker to end")
        assert driver.wait(10) == -signal.SIGKILL
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        for pid in workers.values():  # only if the test failed before they ended
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


WEIGHTS_JOB = """
import gc, sys, weakref
from kubellm.runtime import LLM
llm = LLM(sys.argv[1], device="cpu", dtype="float32", distributed_executor_backend="mp",
          num_kv_blocks=64, max_model_len=128)
model = weakref.ref(llm.engine.executor.stage.model)
llm.shutdown()
gc.collect()
print("weights freed" if model() is None else f"weights held by {gc.get_referrers(model())}",
      flush=True)
# What this job checks is printed; the interpreter's exit after a multi-process engine's
# shutdown aborted once in ~5 clean-clone runs ("terminate called without an active
# exception", a C++ thread at exit), a known open bug named in the closing note that
# the exit tests of test_layouts_one_after_another still cover.
import os
os._exit(0)
"""


def test_shutdown_lets_go_of_the_weights_while_the_engine_is_still_referenced(tiny_model_dir):
    """On the GPU, memory after LLM.shutdown() must fall back to the baseline even though
    the caller still holds ``llm``: no part of the engine may keep the model alive."""
    proc = subprocess.run([sys.executable, "-c", WEIGHTS_JOB, tiny_model_dir],
                          env={**os.environ, **DIST_ENV}, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.strip().splitlines()[-1] == "weights freed", proc.stdout[-2000:]
