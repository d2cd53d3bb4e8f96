"""The engine core's loop with a stand-in engine: what each step holds.

A burst of requests that reaches an idle core over a few ms must start in one step: a
first step holding only the first arrival makes every other request wait a whole step
(issue 14, 64 requests at once)."""
from __future__ import annotations

import dataclasses
import os
import signal
import tempfile
import threading

import pytest
import zmq

from kubellm.runtime.core.sampling_params import SamplingParams
from kubellm.runtime.engine_core import core_proc, wire


@dataclasses.dataclass
class _Stats:
    num_waiting: int = 0


class StepRecorder:
    """Takes requests in, and on each step records which ones it holds (then stops the
    core after ``num_steps`` steps)."""

    def __init__(self):
        self.requests: list[str] = []
        self.steps: list[list[str]] = []
        self.first_added = threading.Event()
        self.core = None

    def has_unfinished_requests(self) -> bool:
        return bool(self.requests)

    def add_request(self, request_id, prompt_token_ids, params, priority=0):
        self.requests.append(request_id)
        self.first_added.set()

    def abort_request(self, request_id):
        self.requests.remove(request_id)

    def step(self):
        self.steps.append(list(self.requests))
        self.core._exit_code = 0
        return []

    def get_stats(self):
        return _Stats()


@pytest.fixture
def core_and_sender():
    old_handler = signal.getsignal(signal.SIGTERM)
    ipc_dir = tempfile.mkdtemp(prefix="kubellm-test-core-")
    context = zmq.Context()
    outputs = context.socket(zmq.PULL)
    outputs.bind(wire.output_address(ipc_dir, 0))
    engine = StepRecorder()
    core = core_proc.EngineCore(engine, ipc_dir, 1, os.getpid())
    engine.core = core
    sender = context.socket(zmq.PUSH)
    sender.connect(wire.input_address(ipc_dir))
    try:
        yield core, engine, sender
    finally:
        core.close()
        sender.close(linger=0)
        outputs.close(linger=0)
        context.term()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGTERM, old_handler)


def _add(sender, codec, request_id: str) -> None:
    sender.send(codec.encode([wire.ADD, 0, request_id, [5, 6, 7],
                              wire.pickled(SamplingParams(max_tokens=4)), 0]))


def test_a_burst_reaching_an_idle_core_starts_in_one_step(core_and_sender, monkeypatch):
    core, engine, sender = core_and_sender
    # generous gaps: the test thread sends the rest right after the core took the first
    monkeypatch.setattr(core_proc, "BURST_GAP_MS", 2000.0)
    monkeypatch.setattr(core_proc, "BURST_MAX_MS", 10000.0)
    codec = wire.Codec()
    loop = threading.Thread(target=core.run)
    loop.start()
    _add(sender, codec, "r0")
    assert engine.first_added.wait(30)
    for i in range(1, 16):
        _add(sender, codec, f"r{i}")
    loop.join(60)
    assert not loop.is_alive()
    assert engine.steps[0] == [f"r{i}" for i in range(16)]


def test_a_lone_request_steps_without_waiting_for_the_cap(core_and_sender, monkeypatch):
    """The gather ends at the first quiet gap, not at BURST_MAX_MS."""
    core, engine, sender = core_and_sender
    monkeypatch.setattr(core_proc, "BURST_GAP_MS", 1.0)
    monkeypatch.setattr(core_proc, "BURST_MAX_MS", 3_600_000.0)
    loop = threading.Thread(target=core.run)
    loop.start()
    _add(sender, wire.Codec(), "alone")
    loop.join(60)
    assert not loop.is_alive()
    assert engine.steps == [["alone"]]
