"""Off-by-default collective timing (KUBELLM_COMM_TIMING): which steps it times, what a
span adds, that it costs nothing when off; the multi-process figures are checked by the
multi-GPU script's smoke run (test_multi_gpu_script.py)."""
from __future__ import annotations

import json
import time

import pytest

from kubellm.runtime.config_sources import ConfigError
from kubellm.runtime.parallel import comm_timing


@pytest.fixture(autouse=True)
def _off_afterwards():
    yield
    comm_timing.reset()


def _timed(every: str) -> None:
    comm_timing.configure({comm_timing.ENV: every}, is_cuda=False)


@pytest.fixture
def elapse(monkeypatch):
    """``elapse(ms)`` moves the host clock the spans read: exact totals on any machine."""
    now = [1000.0]
    monkeypatch.setattr(comm_timing, "_clock", lambda: now[0])

    def advance(ms: float) -> None:
        now[0] += ms / 1e3
    return advance


def test_off_by_default_spans_are_a_shared_no_op():
    comm_timing.configure({}, is_cuda=False)
    comm_timing.begin_step(0)
    assert comm_timing.span("all_reduce") is comm_timing.span("send_recv")
    assert comm_timing.summary() is None
    comm_timing.configure({comm_timing.ENV: "0"}, is_cuda=False)
    assert comm_timing.summary() is None


def test_every_nth_step_is_timed_and_spans_add_up(elapse):
    _timed("2")
    with comm_timing.span("all_reduce"):  # before the first step: counted nowhere
        elapse(10)
    for step in range(4):
        comm_timing.begin_step(step)
        for _ in range(2):
            with comm_timing.span("all_reduce"):
                elapse(5)
            elapse(1)                          # between spans: not counted
        with comm_timing.span("send_recv"):
            elapse(2)
    steps = comm_timing.summary()["steps"]
    assert sorted(steps) == [0, 2]
    for totals in steps.values():
        assert totals["all_reduce"] == pytest.approx(10)   # two 5 ms spans
        assert totals["send_recv"] == pytest.approx(2)
        assert totals["all_gather"] == 0.0


def test_per_step_means_over_a_step_range_after_a_json_round_trip(elapse):
    _timed("1")
    for step in range(3):
        comm_timing.begin_step(step)
        with comm_timing.span("all_gather"):
            elapse(2 * (step + 1))
    summary = json.loads(json.dumps(comm_timing.summary()))  # keys become strings
    means = comm_timing.per_step_ms(summary, first_step=1, end_step=3)
    assert means["timed_steps"] == 2
    assert means["all_gather"] == pytest.approx(5)          # (4 ms + 6 ms) / 2
    assert comm_timing.per_step_ms(summary, first_step=7)["all_gather"] is None


def test_kept_steps_are_bounded(monkeypatch):
    monkeypatch.setattr(comm_timing, "MAX_STEPS", 3)
    _timed("1")
    for step in range(5):
        comm_timing.begin_step(step)
    assert sorted(comm_timing.summary()["steps"]) == [2, 3, 4]


@pytest.mark.parametrize("raw", ["yes", "-1"])
def test_a_bad_setting_names_the_variable(raw):
    with pytest.raises(ConfigError, match=comm_timing.ENV):
        _timed(raw)


@pytest.mark.gpu
def test_cuda_spans_time_the_stream_not_the_host():
    import torch
    if not torch.cuda.is_available():
        pytest.skip(reason="needs a CUDA GPU")
    comm_timing.configure({comm_timing.ENV: "1"}, is_cuda=True)
    comm_timing.begin_step(0)
    t0 = time.perf_counter()
    with comm_timing.span("all_reduce"):
        torch.cuda._sleep(100_000_000)  # tens of ms on the GPU; the host returns at once
    host_ms = (time.perf_counter() - t0) * 1e3
    device_ms = comm_timing.summary()["steps"][0]["all_reduce"]
    assert device_ms > 5 and host_ms < device_ms / 2, (device_ms, host_ms)
