"""Keep startup's objects out of the garbage collector's full scans.

A serving process builds its long-lived objects at startup (the engine, its KV block
objects, the model's modules, the tokenizer, the app) and then allocates only per
request. Python's generation-2 collection walks every tracked object, so in the engine
core it took tens of ms while a step waited: on the H200 (2026-12-02, calls 8 and 9) a
step holding a new 512-token prefill took ~70 ms on the core's host before the heap was
frozen and 34 ms after, and the 64-request, 16 req/s load's TTFT p50 went 151 -> 54 ms.
With streamed outputs (an output object per request and step) a full collection came
every few hundred steps and walked the whole startup heap: 0.23 s at once on the CPU
benchmark's 400k objects (benchmarks/cpu/host_overhead.py). vLLM's engine core freezes
the same way. A process unfreezes before it exits (``gc.unfreeze()``): the last
collection then frees what startup made (else Triton's nanobind bindings report leaks).
"""
from __future__ import annotations

import gc


def freeze_startup_heap() -> int:
    """Collect what startup left behind, then move every surviving object to the
    permanent generation; returns how many were frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def thaw_startup_heap() -> None:
    """Before the process exits: its last collection may then free what startup made."""
    gc.unfreeze()
