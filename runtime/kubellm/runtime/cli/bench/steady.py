"""Driving an engine into steady decode, for benchmarks that time decode steps alone."""
from __future__ import annotations

import time


def fill_until_decoding(engine, requests: dict, params) -> None:
    """Add ``requests`` (id -> prompt token ids), step until every one of them decodes
    (no prefill left), then zero the engine's host-time counters."""
    for request_id, prompt in requests.items():
        engine.add_request(request_id, prompt, params)
    while engine.scheduler.waiting or any(r.num_computed_tokens < r.num_tokens - 1
                                          for r in engine.scheduler.running):
        engine.step()
    reset_counters(engine)


def reset_counters(engine) -> None:
    """Zero the engine's and its runner's host-time counters."""
    engine.timings.update(schedule_s=0.0, execute_s=0.0, postprocess_s=0.0, wait_s=0.0,
                          steps=0)
    engine.executor.host_time_s = 0.0


def time_steps(engine, steps: int, warmup: int = 0) -> dict:
    """Run ``steps`` steps, after ``warmup`` untimed ones (first uses of lazily loaded
    CUDA kernels stay out of the figures): wall ms per step, host ms per phase, ms blocked
    on the device, and (on CUDA) the device's busy and idle time per step."""
    import torch

    def sync():
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    for _ in range(warmup):
        engine.step()
    reset_counters(engine)
    engine.executor.trace_device(True)
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        engine.step()
    sync()
    wall = time.perf_counter() - t0
    result = {"step_ms": round(wall / steps * 1e3, 3), **host_ms_per_step(engine, steps),
              "wait_ms": round(engine.timings["wait_s"] / steps * 1e3, 3),
              **(device_idle(engine.executor) or {})}
    engine.executor.trace_device(False)
    return result


def host_ms_per_step(engine, steps: int) -> dict:
    """The counters since they were last reset, per step, in milliseconds."""
    t = engine.timings
    prepare = engine.executor.host_time_s
    per = lambda s: round(s / steps * 1e3, 3)  # noqa: E731
    return {"schedule_ms": per(t["schedule_s"]), "prepare_ms": per(prepare),
            "postprocess_ms": per(t["postprocess_s"]),
            "host_ms": per(t["schedule_s"] + prepare + t["postprocess_s"])}


def device_idle(runner) -> dict | None:
    """From ``runner.trace_device()``'s events: device time per step and the share of the
    wall time the device sat idle between steps (waiting for the host). None off CUDA."""
    trace = runner.device_trace
    if not trace:
        return None
    import torch
    torch.cuda.synchronize()
    busy = sum(start.elapsed_time(end) for start, end in trace)
    idle = sum(end.elapsed_time(next_start)
               for (_, end), (next_start, _) in zip(trace, trace[1:]))
    wall = trace[0][0].elapsed_time(trace[-1][1])
    return {"device_ms_per_step": round(busy / len(trace), 3),
            "device_idle_ms_per_step": round(idle / max(1, len(trace) - 1), 3),
            "device_idle_fraction": round(idle / wall, 4) if wall > 0 else 0.0}
