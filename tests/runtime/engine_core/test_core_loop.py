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
import time

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


def _add(sender, codec, request_id: str, num_preparing: int = 0) -> None:
    sender.send(codec.encode([wire.ADD, 0, request_id, [5, 6, 7],
                              wire.pickled(SamplingParams(max_tokens=4)), 0, num_preparing]))


def _start(core, monkeypatch, gap_ms: float, cap_ms: float) -> threading.Thread:
    """The core's loop on a thread, with these burst knobs."""
    monkeypatch.setattr(core_proc, "BURST_GAP_MS", gap_ms)
    monkeypatch.setattr(core_proc, "BURST_MAX_MS", cap_ms)
    loop = threading.Thread(target=core.run)
    loop.start()
    return loop


@pytest.mark.parametrize("value", ["soon", "-1", "nan", "inf"])
def test_a_bad_burst_knob_names_the_variable(monkeypatch, value):
    monkeypatch.setenv("KUBELLM_CORE_BURST_GAP_MS", value)
    with pytest.raises(SystemExit, match="KUBELLM_CORE_BURST_GAP_MS"):
        core_proc._env_ms("KUBELLM_CORE_BURST_GAP_MS", 2.0)
    monkeypatch.setenv("KUBELLM_CORE_BURST_GAP_MS", "0")
    assert core_proc._env_ms("KUBELLM_CORE_BURST_GAP_MS", 2.0) == 0.0


def test_a_burst_reaching_an_idle_core_starts_in_one_step(core_and_sender, monkeypatch):
    core, engine, sender = core_and_sender
    # generous gaps: the test thread sends the rest right after the core took the first
    loop = _start(core, monkeypatch, 2000.0, 10000.0)
    codec = wire.Codec()
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
    loop = _start(core, monkeypatch, 1.0, 3_600_000.0)
    _add(sender, wire.Codec(), "alone")
    loop.join(60)
    assert not loop.is_alive()
    assert engine.steps == [["alone"]]


def test_a_front_end_still_preparing_holds_the_first_step(core_and_sender, monkeypatch):
    """A front end that has read requests says so when it starts on the first (PREPARING)
    and with each add (how many it still prepares); the core waits for them however
    long the gaps (up to the cap), not one gap."""
    core, engine, sender = core_and_sender
    loop = _start(core, monkeypatch, 1.0, 3_600_000.0)
    codec = wire.Codec()
    sender.send(codec.encode([wire.PREPARING, 0, 1]))  # read one, preparing it
    time.sleep(0.05)
    _add(sender, codec, "r0", num_preparing=3)
    assert engine.first_added.wait(30)
    for i in range(1, 4):
        time.sleep(0.05)   # far more than a gap: only the hint keeps the core waiting
        _add(sender, codec, f"r{i}", num_preparing=3 - i)
    loop.join(60)
    assert not loop.is_alive()
    assert engine.steps[0] == ["r0", "r1", "r2", "r3"]


def test_a_second_front_end_announcing_work_keeps_the_core_waiting(core_and_sender,
                                                                   monkeypatch):
    """A PREPARING from another front end mid-gather is no quiet gap: the core waits for
    that front end's add too."""
    core, engine, sender = core_and_sender
    monkeypatch.setattr(core_proc, "BURST_GAP_MS", 300.0)   # the PREPARING comes within it
    monkeypatch.setattr(core_proc, "BURST_MAX_MS", 3_600_000.0)
    codec = wire.Codec()
    loop = threading.Thread(target=core.run)
    loop.start()
    _add(sender, codec, "r0", num_preparing=0)
    assert engine.first_added.wait(30)
    sender.send(codec.encode([wire.PREPARING, 0, 1]))
    time.sleep(0.6)   # two gaps: only the announcement keeps the core waiting
    _add(sender, codec, "r1", num_preparing=0)
    loop.join(60)
    assert not loop.is_alive()
    assert engine.steps[0] == ["r0", "r1"]


@pytest.mark.parametrize("tokens,seqs,run_ahead,fill", [
    (6, 100, False, 2), (6, 100, True, 4), (10_000, 2, True, 2)],
    ids=["token-budget", "two-steps-with-async-scheduling", "max-num-seqs"])
def test_the_gather_ends_once_the_burst_fills_the_first_steps(core_and_sender, monkeypatch,
                                                              tokens, seqs, run_ahead, fill):
    """Two 3-token prompts fill a 6-token step, four fill the two steps async scheduling
    plans before the first lands, two fill a step of two sequences: the core steps with
    them although a front end announces more and the cap is an hour."""
    core, engine, sender = core_and_sender
    engine.scheduler = type("Scheduler", (), {"max_num_batched_tokens": tokens,
                                              "max_num_seqs": seqs})()
    engine.run_ahead = run_ahead
    loop = _start(core, monkeypatch, 3_600_000.0, 3_600_000.0)
    codec = wire.Codec()
    for i in range(fill):
        _add(sender, codec, f"r{i}", num_preparing=fill + 1 - i)
        if i == 0:
            assert engine.first_added.wait(30)
    loop.join(60)
    assert not loop.is_alive()
    assert engine.steps == [[f"r{i}" for i in range(fill)]]


def test_the_stats_sent_each_step_read_as_the_engines_whole_stats():
    from kubellm.runtime.engine.llm_engine import EngineStats
    stats = EngineStats(1, 2, 0.5, 3, 4, 5, 6, 7, 8, 9,
                        iteration_tokens=((1, 8, 64), (0, 2, 5, 5), 90))
    engine = type("Engine", (), {"get_stats": lambda self: stats})()
    codec = wire.Codec()
    sent = codec.decode(codec.encode(core_proc._stats(engine)))
    assert sent == codec.decode(codec.encode(dataclasses.asdict(stats)))
    assert sent["iteration_tokens"] == [[1, 8, 64], [0, 2, 5, 5], 90]
