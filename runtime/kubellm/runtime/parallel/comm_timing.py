"""Off-by-default timing of the collectives: per step, how long this rank spent in
tensor-parallel all-reduce / all-gather and in pipeline send/recv (benchmarks).

``KUBELLM_COMM_TIMING=N`` times every N-th step (1 = all) on every rank; unset or 0 =
off, and then a span is a shared no-op context. On CUDA a span is a pair of events on
the compute stream, so it measures how long that stream waited for the collective —
the transfer plus waiting for the slowest peer (for send/recv, for the other stage) —
not the host's launch time; events are read back only when asked, or when many are
pending. On CPU (gloo: the calls block) a span is host time. A span counts toward the
step most recently begun (PipelineStage.run begins each); none before the first step.
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping

import torch

from kubellm.runtime.config_sources import ConfigError

ENV = "KUBELLM_COMM_TIMING"
KINDS = ("all_reduce", "all_gather", "send_recv")
MAX_PENDING = 8192      # CUDA event pairs held before a forced read-back
MAX_STEPS = 100_000     # per-step totals kept (oldest dropped): bounded if left on
_NULL = contextlib.nullcontext()
_clock = time.perf_counter   # host spans (CPU); tests step a clock of their own


class CommTimer:
    def __init__(self, every: int, is_cuda: bool):
        self.every = every
        self.is_cuda = is_cuda
        self.steps: dict[int, dict[str, float]] = {}   # step -> kind -> ms
        self._step: int | None = None                   # None: this step is not timed
        self._pending: list[tuple[int, str, object, object]] = []  # CUDA event pairs
        self._free_events: list = []

    def begin_step(self, step: int) -> None:
        self._step = step if step % self.every == 0 else None
        if self._step is not None:
            self.steps[step] = dict.fromkeys(KINDS, 0.0)
            if len(self.steps) > MAX_STEPS:
                del self.steps[next(iter(self.steps))]
        if len(self._pending) >= MAX_PENDING:
            self._read_events()

    def span(self, kind: str):
        if self._step is None or (self.is_cuda and torch.cuda.is_current_stream_capturing()):
            return _NULL  # an event inside a graph capture would replay with the graph
        return _Span(self, kind, self._step)

    def summary(self) -> dict:
        """{"every": N, "steps": {step: {kind: ms}}} of every timed step so far."""
        self._read_events()
        return {"every": self.every, "steps": {s: dict(k) for s, k in self.steps.items()}}

    def _event(self):
        return self._free_events.pop() if self._free_events else \
            torch.cuda.Event(enable_timing=True)

    def _add(self, step: int, kind: str, ms: float) -> None:
        totals = self.steps.get(step)
        if totals is not None:  # None: dropped by MAX_STEPS meanwhile
            totals[kind] += ms

    def _read_events(self) -> None:
        if not self._pending:
            return
        torch.cuda.synchronize()
        for step, kind, start, end in self._pending:
            self._add(step, kind, start.elapsed_time(end))
            self._free_events += (start, end)
        self._pending.clear()


class _Span:
    __slots__ = ("timer", "kind", "step", "start")

    def __init__(self, timer: CommTimer, kind: str, step: int):
        self.timer, self.kind, self.step = timer, kind, step

    def __enter__(self):
        if self.timer.is_cuda:
            self.start = self.timer._event()
            self.start.record()
        else:
            self.start = _clock()

    def __exit__(self, *exc) -> bool:
        timer = self.timer
        if timer.is_cuda:
            end = timer._event()
            end.record()
            timer._pending.append((self.step, self.kind, self.start, end))
        else:
            timer._add(self.step, self.kind, (_clock() - self.start) * 1e3)
        return False


_TIMER: CommTimer | None = None


def configure(env: Mapping[str, str], is_cuda: bool) -> None:
    """Turn timing on for this process when the env asks (parallel_state.initialize)."""
    global _TIMER
    raw = env.get(ENV, "").strip() or "0"
    try:
        every = int(raw)
    except ValueError:
        raise ConfigError(ENV, f"{ENV}={raw!r}: expected N, to time every N-th step") from None
    if every < 0:
        raise ConfigError(ENV, f"{ENV} must be >= 0, got {every}")
    _TIMER = CommTimer(every, is_cuda) if every else None


def reset() -> None:
    global _TIMER
    _TIMER = None


def begin_step(step: int) -> None:
    if _TIMER is not None:
        _TIMER.begin_step(step)


def span(kind: str):
    """``with span("all_reduce"): ...`` — a no-op unless this step is timed."""
    return _NULL if _TIMER is None else _TIMER.span(kind)


def summary() -> dict | None:
    """This rank's per-step totals, or None when timing is off."""
    return None if _TIMER is None else _TIMER.summary()


def per_step_ms(summary_: dict, first_step: int, end_step: int | None = None) -> dict:
    """Mean ms per timed step in [first_step, end_step), by kind, and how many steps."""
    steps = [t for s, t in summary_["steps"].items()
             if int(s) >= first_step and (end_step is None or int(s) < end_step)]
    means = {k: round(sum(t[k] for t in steps) / len(steps), 4) if steps else None
             for k in KINDS}
    return {**means, "timed_steps": len(steps)}
