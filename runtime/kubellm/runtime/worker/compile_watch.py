"""Logs every Triton kernel compile that happens after startup.

Startup compiles and tunes the kernels it can foresee (the memory profile's forward, the
short-prefill warm-up, each CUDA graph's eager run). A step whose shapes reach a kernel
specialization none of those did compiles it inline, and every request in the batch waits:
on the H200 (2026-12-02, call 6), the first timed serving load's TTFT p90 was 2.07 s over
HTTP against 0.11 s for the same schedule in process, which ran second with the compiled
kernels on disk. Each late compile is logged at WARNING with the kernel, its
specialization and its duration, and counted, so that a stall names its cause.
"""
from __future__ import annotations

import logging
import threading
import time

log = logging.getLogger(__name__)

_lock = threading.Lock()
_started: dict[str, float] = {}
compiles_after_startup = 0   # read by tests and benchmarks


def _name(fn) -> str:
    return f"{getattr(fn, 'module', '?')}.{getattr(fn, 'name', '?')}"


def _before(*, key, repr, fn, compile, is_manual_warmup, already_compiled):  # noqa: A002
    with _lock:
        _started[str(key)] = time.perf_counter()
    return None   # a true value would make Triton skip the compile


def _after(*, key, repr, fn, compile, is_manual_warmup, already_compiled):  # noqa: A002
    global compiles_after_startup
    with _lock:
        start = _started.pop(str(key), None)
        compiles_after_startup += 1
    took = "" if start is None else f" in {(time.perf_counter() - start) * 1e3:.0f} ms"
    log.warning("Triton compiled %s after startup%s; the step waited for it: %s",
                _name(fn), took, repr[:600])
    return None


def watch_compiles_after_startup(device=None) -> bool:
    """Installs the hooks (Triton's runtime knobs) for a CUDA ``device`` (None: whatever
    this process runs); False off CUDA or where this Triton has no such knobs."""
    if device is not None and getattr(device, "type", device) != "cuda":
        return False
    try:
        from triton import knobs
    except ImportError:
        return False
    runtime = getattr(knobs, "runtime", None)
    if runtime is None or not hasattr(runtime, "jit_post_compile_hook"):
        return False
    runtime.jit_cache_hook = _before
    runtime.jit_post_compile_hook = _after
    return True
