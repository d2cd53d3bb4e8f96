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

The young generation's threshold goes up too. CPython collects it whenever the objects
allocated minus those freed pass 700, and a streamed decode step allocates ~4 per running
request (its output objects) before the step's caller drops the last step's: at batch
256 every step paid a young collection (~65 us on the CPU benchmark's machine) and every
tenth a middle one (~0.5 ms), 0.11 ms a step in all. Above a step's churn, a collection
comes only once the live heap has really grown by that many objects.
"""
from __future__ import annotations

import gc

YOUNG_THRESHOLD = 50_000   # allocations net of frees between young collections


def freeze_startup_heap() -> int:
    """Collect what startup left behind, then move every surviving object to the
    permanent generation and raise the young generation's threshold; returns how many
    were frozen."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    return gc.get_freeze_count()


def thaw_startup_heap() -> None:
    """Before the process exits: its last collection may then free what startup made."""
    gc.unfreeze()
