"""Pull a span of a tensor's bytes from device memory into the GPU's L2 cache, reading
nothing back (a hint: the kernel writes nothing and the data it touches are unchanged).

Why: at one to a few rows a decode step streams its weights GEMM after GEMM, and between
two GEMMs the small kernels (norms, rotary, attention, the activation) leave device
memory nearly idle, as does each GEMM's own start. Launched beside those kernels (on
another stream, or a parallel branch of a CUDA graph), this kernel fills that idle time
with the next GEMM's first bytes, which the GEMM then reads from L2
(runtime/worker/weight_prefetch.py arranges it).

``MODE`` picks the PTX instruction each thread issues:
- ``line``: ``prefetch.global.L2`` per 128-byte line;
- ``line_last``: the same with the ``evict_last`` priority, so the GEMM before (which
  streams with the normal priority) evicts its own lines first;
- ``bulk``: ``cp.async.bulk.prefetch.L2`` (Hopper's tensor memory accelerator) of
  ``BULK_BYTES`` per thread: one instruction per span instead of one per line.

Inline PTX has no interpreter: on CPU tensors ``l2_prefetch`` does nothing (a CPU has no
L2 to fill), and ``l2_prefetch_reference`` states what the kernel touches.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from kubellm.kernels._launch import is_interpreted

LINE = 128                     # bytes per L2 line (the unit of a line prefetch)
BULK_BYTES = 4096              # bytes per thread in the bulk mode (a multiple of 16)
MODES = {"line": 0, "line_last": 1, "bulk": 2}
LINES_PER_PROGRAM = 1024       # 128 KiB per program in the line modes
NUM_WARPS = 4


@triton.jit
def _l2_prefetch_kernel(base, n_units, UNIT: tl.constexpr, UNITS_PER_PROGRAM: tl.constexpr,
                        BLOCK: tl.constexpr, MODE: tl.constexpr):
    """Program p prefetches units [p * UNITS_PER_PROGRAM, (p + 1) * UNITS_PER_PROGRAM) of
    ``UNIT`` bytes each from ``base`` (a byte pointer); units past ``n_units`` repeat the
    last one (a prefetch has no mask; a repeated address costs nothing extra)."""
    first = tl.program_id(0).to(tl.int64) * UNITS_PER_PROGRAM
    for start in range(0, UNITS_PER_PROGRAM, BLOCK):
        unit = tl.minimum(first + start + tl.arange(0, BLOCK), n_units - 1)
        address = base + unit * UNIT
        if MODE == 0:
            tl.inline_asm_elementwise("prefetch.global.L2 [$1];\n\tmov.u32 $0, 0;",
                                      "=r,l", [address], dtype=tl.int32, is_pure=False,
                                      pack=1)
        elif MODE == 1:
            tl.inline_asm_elementwise("prefetch.global.L2::evict_last [$1];\n\tmov.u32 $0, 0;",
                                      "=r,l", [address], dtype=tl.int32, is_pure=False,
                                      pack=1)
        else:
            tl.inline_asm_elementwise(
                f"cp.async.bulk.prefetch.L2.global [$1], {UNIT};\n\tmov.u32 $0, 0;",
                "=r,l", [address], dtype=tl.int32, is_pure=False, pack=1)


def prefetch_plan(n_bytes: int, mode: str) -> tuple[int, int, int]:
    """(unit bytes, units, programs) for prefetching ``n_bytes`` in ``mode``: whole units
    only (a span's last partial unit is left out: the GEMM reads it from memory)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    unit = BULK_BYTES if mode == "bulk" else LINE
    units = n_bytes // unit
    per_program = LINES_PER_PROGRAM * LINE // unit
    return unit, units, triton.cdiv(units, per_program) if units else 0


def l2_prefetch(t: torch.Tensor, max_bytes: int | None = None, mode: str = "line") -> int:
    """Prefetch the first ``max_bytes`` (None: all) of contiguous ``t``'s storage into L2,
    on the current stream. Returns the bytes asked for (0 on CPU tensors, where it does
    nothing). Never waits for the copy: the data arrive while later kernels run."""
    if not t.is_contiguous():
        raise ValueError(f"l2_prefetch needs a contiguous tensor, got strides {t.stride()}")
    if t.device.type != "cuda" or is_interpreted(_l2_prefetch_kernel):
        return 0
    n_bytes = t.numel() * t.element_size()
    if max_bytes is not None:
        n_bytes = min(n_bytes, max_bytes)
    unit, units, programs = prefetch_plan(n_bytes, mode)
    if units == 0:
        return 0
    per_program = LINES_PER_PROGRAM * LINE // unit
    block = min(per_program, 32 * NUM_WARPS)
    _l2_prefetch_kernel[(programs,)](t.view(-1).view(torch.uint8), units, UNIT=unit,
                                     UNITS_PER_PROGRAM=per_program, BLOCK=block,
                                     MODE=MODES[mode], num_warps=NUM_WARPS)
    return units * unit


def l2_prefetch_reference(t: torch.Tensor, max_bytes: int | None = None,
                          mode: str = "line") -> tuple[int, int]:
    """The byte range ``[0, end)`` of ``t``'s storage the kernel touches, and its units."""
    n_bytes = t.numel() * t.element_size()
    if max_bytes is not None:
        n_bytes = min(n_bytes, max_bytes)
    unit, units, _ = prefetch_plan(n_bytes, mode)
    return units * unit, units
