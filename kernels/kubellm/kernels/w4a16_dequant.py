"""Dequantize packed 4-/8-bit weights (quant_layout.py) into a dense [K, N] matrix in x's
dtype, then multiply with cuBLAS: the W4A16 GEMM for many rows.

Past a few dozen rows a W4A16 GEMM is bound by its MMAs, and every kernel here that
dequantizes inside its K loop spends issue slots on unpacking that cuBLAS spends on MMAs:
on the H200 at 256 rows "dot" took 3.1x and "gemm-tc" 2.2x torch's bf16 linear (calls
44-45). Writing W once in 16-bit (2 bytes per weight, plus the half byte read) costs a
fixed time per call, so for prefill-sized calls the product runs at cuBLAS's rate. vLLM's
AWQ path does the same past 256 tokens.

The dense matrix is a temporary from torch's caching allocator (reused across calls, in
a CUDA graph's pool when captured). A weight larger than SLAB_ELEMENTS is done in slabs of
columns so the temporary stays bounded (a 4-bit LM head of 128k columns would need 1 GB).
Each weight is ``code * scale + bias`` in fp32, rounded once to x's dtype: what
quant_layout.dequantize (the reference) computes.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from kubellm.kernels._launch import is_interpreted, kernel_for
from kubellm.kernels.quant_layout import codes_per_word

# the most weights one temporary holds: 2**26 bf16 weights are 128 MiB (Llama-3-8B's
# largest projection, gate+up 4096 x 28672, is 1.75 slabs)
SLAB_ELEMENTS = 1 << 26


@triton.jit
def _dequant_kernel(
    qw_ptr,       # [K // PACK, N] int32 codes
    scale_ptr,    # [num_groups, N]
    bias_ptr,     # [num_groups, N]
    gidx_ptr,     # [K] int32 group of each K row (HAS_G_IDX)
    out_ptr,      # [K, N] in x's dtype
    K, N,
    stride_qk, stride_sg, stride_ok,
    BITS: tl.constexpr,
    GROUP_SIZE: tl.constexpr,
    HAS_G_IDX: tl.constexpr,
    BLOCK_WORDS: tl.constexpr,   # K rows of words per program: BLOCK_WORDS * PACK rows
    BLOCK_N: tl.constexpr,
):
    PACK: tl.constexpr = 32 // BITS
    pid_w = tl.program_id(0)
    pid_n = tl.program_id(1)
    words_at = pid_w * BLOCK_WORDS + tl.arange(0, BLOCK_WORDS)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < N
    words = tl.load(qw_ptr + words_at[:, None] * stride_qk + cols[None, :],
                    mask=(words_at[:, None] < K // PACK) & col_ok[None, :], other=0)
    position = tl.arange(0, PACK)
    # [BLOCK_WORDS, PACK, BLOCK_N]: K row word * PACK + position (arithmetic shifts: the
    # sign bits they bring in are masked off)
    codes = (words[:, None, :] >> (position[None, :, None] * BITS)) & ((1 << BITS) - 1)
    rows = words_at[:, None, None] * PACK + position[None, :, None]
    row_ok = rows < K
    mask = row_ok & col_ok[None, None, :]
    # a program's rows lie in one group when the group is a whole number of its tiles:
    # one row of scales; otherwise (act order, small groups) each row gathers its own
    if HAS_G_IDX or GROUP_SIZE % (BLOCK_WORDS * PACK) != 0:
        if HAS_G_IDX:
            group = tl.load(gidx_ptr + rows, mask=row_ok, other=0)
        else:
            group = rows // GROUP_SIZE
        scale = tl.load(scale_ptr + group * stride_sg + cols[None, None, :], mask=mask,
                        other=0.0)
        bias = tl.load(bias_ptr + group * stride_sg + cols[None, None, :], mask=mask,
                       other=0.0)
    else:
        at = (pid_w * BLOCK_WORDS * PACK) // GROUP_SIZE * stride_sg + cols
        scale = tl.load(scale_ptr + at, mask=col_ok, other=0.0)[None, None, :]
        bias = tl.load(bias_ptr + at, mask=col_ok, other=0.0)[None, None, :]
    w = codes.to(tl.float32) * scale.to(tl.float32) + bias.to(tl.float32)
    tl.store(out_ptr + rows * stride_ok + cols[None, None, :],
             w.to(out_ptr.dtype.element_ty), mask=mask)


# memory-bound (half a byte read, two written per weight): a few tile shapes, tuned per
# shape once (the engine's eager warm-up does it before any CUDA graph capture)
_CONFIGS = [triton.Config({"BLOCK_WORDS": w, "BLOCK_N": n}, num_warps=nw)
            for w, n, nw in ((4, 256, 4), (8, 128, 4), (2, 512, 4), (8, 256, 8))]
_tuned = triton.autotune(configs=_CONFIGS, key=["K", "N", "BITS", "GROUP_SIZE",
                                                "HAS_G_IDX"])(_dequant_kernel)
_INTERPRETED = {"BLOCK_WORDS": 2, "BLOCK_N": 32}


def dequantize_into(out: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor,
                    biases: torch.Tensor, group_size: int, bits: int,
                    g_idx: torch.Tensor | None = None) -> torch.Tensor:
    """Fill ``out`` [K, N] (last dim contiguous; a column slice of a wider matrix is fine)
    with the weights of ``qweight`` [K // PACK, N] (last dim contiguous)."""
    pack = codes_per_word(bits)
    k, n = out.shape
    kernel = kernel_for(_dequant_kernel, out.device, tuned=_tuned)
    kwargs = dict(BITS=bits, GROUP_SIZE=group_size, HAS_G_IDX=g_idx is not None)
    if is_interpreted(_dequant_kernel):
        kwargs.update(_INTERPRETED)
    grid = lambda meta: (triton.cdiv(k // pack, meta["BLOCK_WORDS"]),  # noqa: E731
                         triton.cdiv(n, meta["BLOCK_N"]))
    kernel[grid](qweight, scales, biases, g_idx if g_idx is not None else qweight, out,
                 k, n, qweight.stride(0), scales.stride(0), out.stride(0), **kwargs)
    return out


def launch(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor,
           biases: torch.Tensor, group_size: int, bits: int,
           g_idx: torch.Tensor | None = None) -> torch.Tensor:
    """x [M, K] @ W -> new [M, N] in x's dtype: W dequantized (in slabs of columns of at
    most SLAB_ELEMENTS weights), then torch.mm."""
    m, k = x.shape
    n = qweight.shape[1]
    cols = n if k * n <= SLAB_ELEMENTS else max(128, SLAB_ELEMENTS // k // 128 * 128)
    if cols >= n:
        w = dequantize_into(torch.empty((k, n), dtype=x.dtype, device=x.device), qweight,
                            scales, biases, group_size, bits, g_idx)
        return torch.mm(x, w)
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    w = torch.empty((k, cols), dtype=x.dtype, device=x.device)
    for start in range(0, n, cols):
        stop = min(n, start + cols)
        part = dequantize_into(w[:, :stop - start], qweight[:, start:stop],
                               scales[:, start:stop], biases[:, start:stop], group_size,
                               bits, g_idx)
        torch.mm(x, part, out=out[:, start:stop])
    return out
