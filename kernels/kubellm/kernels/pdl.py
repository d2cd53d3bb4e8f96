"""Programmatic dependent launch (PDL, Hopper and later): a kernel launched with
``launch_pdl=True`` may start while the kernel before it in the stream still runs, once
every program of that one has called ``gdc_launch_dependents`` (or ended). It must call
``gdc_wait`` before it reads what the kernel before wrote, or writes anything.

Why: a decode step of a few rows is a chain of weight reads, and each kernel of it pays
a few microseconds of its own -- the first loads' latency, the last programs' tail --
above its bytes at the copy rate (s20 call 69: 3.3-4.7 us per projection at one row).
A kernel that starts early can have its weights on their way into the L2 during the tail
of the kernel before: weights do not depend on it, only the activations do.
"""
from __future__ import annotations

import triton
import triton.language as tl

_PREFETCH = tl.constexpr("prefetch.global.L2::evict_last [$1];\n mov.u32 $0, 0;")


@triton.jit
def prefetch_l2(ptrs):
    """Ask for the 128-byte lines at ``ptrs`` (a tensor of pointers, one per line) to be
    brought into the L2; nothing is loaded into registers. Not pure: never optimised away."""
    tl.inline_asm_elementwise(_PREFETCH, "=r,l", [ptrs], dtype=tl.int32, is_pure=False,
                              pack=1)


@triton.jit
def start_dependents_then_wait(ptrs, PREFETCH: tl.constexpr):
    """Let the next kernel start early, prefetch ``ptrs`` (this program's weight lines)
    if PREFETCH, then wait for the kernel before to finish."""
    tl.extra.cuda.gdc_launch_dependents()
    if PREFETCH:
        prefetch_l2(ptrs)
    tl.extra.cuda.gdc_wait()


def supported(device) -> bool:
    """PDL needs a CUDA device of compute capability 9.0 or more (and not the interpreter)."""
    import torch
    return (getattr(device, "type", None) == "cuda"
            and torch.cuda.get_device_capability(device) >= (9, 0))

