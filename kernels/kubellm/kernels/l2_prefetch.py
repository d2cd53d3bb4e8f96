"""Ask the L2 to fetch tensors ahead of the kernel that reads them (Hopper's bulk L2
prefetch, ``cp.async.bulk.prefetch.L2``): a kernel that only issues the requests and
exits, so the read proceeds while the next kernels (a small decode step's attention,
norms) leave the DRAM idle.

Each program's threads issue one request each for ``CHUNK`` bytes of the tensors' memory.
Nothing waits for the requests, nothing is written, and a prefetch never changes a
result: where the GPU has no bulk prefetch (before compute capability 9.0) or the tensors
are on the CPU, ``l2_prefetch`` does nothing.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from kubellm.kernels._launch import is_interpreted

CHUNK = 16384          # bytes per request
PER_PROGRAM = 128      # requests per program (one per thread at four warps)


@triton.jit
def _l2_prefetch_kernel(
    flag_ptr,          # [1] int32, never written (keeps the requests from being dropped)
    address,           # the first byte's address, 16-byte aligned
    num_bytes,
    CHUNK: tl.constexpr,
    PER_PROGRAM: tl.constexpr,
):
    offs = (tl.program_id(0) * PER_PROGRAM + tl.arange(0, PER_PROGRAM)).to(tl.int64) * CHUNK
    size = tl.minimum(num_bytes - offs, CHUNK)     # the last chunk may be shorter
    size = tl.where(size > 0, size, 0).to(tl.int32)
    issued = tl.inline_asm_elementwise(
        """{
        .reg .pred p;
        setp.gt.s32 p, $2, 0;
        @p cp.async.bulk.prefetch.L2.global [$1], $2;
        mov.b32 $0, 0;
        }""",
        "=r,l,r", [address + offs, size], dtype=tl.int32, is_pure=False, pack=1)
    tl.store(flag_ptr + tl.zeros_like(issued), issued, mask=issued != 0)


_FLAGS: dict[torch.device, torch.Tensor] = {}


def supported(t: torch.Tensor) -> bool:
    """Whether a prefetch of ``t`` would issue anything (a Hopper or later GPU)."""
    return (t.is_cuda and not is_interpreted(_l2_prefetch_kernel)
            and torch.cuda.get_device_capability(t.device) >= (9, 0))


def l2_prefetch(*tensors: torch.Tensor) -> None:
    """Issue L2 prefetches for the memory of each contiguous tensor (one launch each);
    a no-op where ``supported`` is False. Capture-safe: the launch holds the address, so
    a CUDA graph must be replayed while the tensors live (weights do)."""
    for t in tensors:
        if not supported(t):
            continue
        if not t.is_contiguous():
            raise ValueError(f"l2_prefetch: tensor of shape {tuple(t.shape)} is not contiguous")
        num_bytes = t.numel() * t.element_size()
        if num_bytes == 0:
            continue
        if t.data_ptr() % 16:
            raise ValueError("l2_prefetch: tensor memory must be 16-byte aligned")
        flag = _FLAGS.get(t.device)
        if flag is None:   # first call per device is eager (engine warm-up), never in capture
            flag = _FLAGS[t.device] = torch.zeros(1, dtype=torch.int32, device=t.device)
        # a request's size must be a multiple of 16: round the tail up inside the allocation
        num_bytes = -(-num_bytes // 16) * 16
        grid = (triton.cdiv(num_bytes, CHUNK * PER_PROGRAM),)
        _l2_prefetch_kernel[grid](flag, t.data_ptr(), num_bytes, CHUNK=CHUNK,
                                  PER_PROGRAM=PER_PROGRAM, num_warps=4)
