"""W4A16 GEMV on tensor cores, for 2-16 rows of x (decode at small batches): out = x @ W with
W as packed 4-bit codes (quant_layout.py), fp16/bf16 activations, fp32 sums.

The FFMA GEMV (w4a16_gemv.py) spends one fp32 FMA per weight and row: 3.75 instructions
per weight at one row but 8.9 at four, so past one row it is bound by issuing them
(s13's SASS counts). Here the GEMM runs transposed -- out^T [N, M] = W^T [N, K] x^T [K, M]
-- so the weights are the tensor-core MMA's first operand, which Hopper's wgmma takes
from registers (no trip through shared memory), and the rows of x are its 8 or 16
columns: one MMA instruction serves every row.

A word's eight codes become four registers of two 16-bit floats each with one LOP3 apiece:
after a shift by 4j, codes j and j + 4 sit at bits 0-3 and 16-19, and OR-ing them into the
mantissas of 128.0 (bf16; 1024.0 for fp16) gives the pair (128 + c_j, 128 + c_{j+4})
exactly. The MMA's K order is free as long as x's follows it, so each pair is two
adjacent K positions (x loaded in the same permuted order). The offset comes out once
per chunk (sum_k x_k (O + c_k) minus O sum_k x_k) and a chunk's group scale and bias
are applied to the sums: s sum x c + b sum x. The offset makes the fp32 sums carry
O sum|x| beside sum x c.

On the H200 (call 41, benchmarks/gpu/gemv_tc.py, Llama-3-8B shapes): 2.4-3.5 SASS
instructions per weight at any row count; against the FFMA GEMV 1.13-1.49x at two rows,
2.0-2.9x at four (its s13 configs: 1.15-1.26x and 1.45-2.0x), against "dot" 1.5-1.7x at
eight and 1.22-1.31x at sixteen; at one row 4-16% slower than the FFMA GEMV, which keeps
one-row calls.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from kubellm.kernels._launch import is_interpreted, kernel_for
from kubellm.kernels.split_k import check_tiles, sum_splits, workspace
from kubellm.kernels.w4a16_gemv import autotuned, refusal

MAX_M = 16
DTYPES = (torch.float16, torch.bfloat16)
# the 16-bit float whose last mantissa bit is worth 1: its bits OR a code into a value
_OFFSET = {torch.bfloat16: 128.0, torch.float16: 1024.0}
_PAIR_PTX = {torch.bfloat16: "lop3.b32 $0, $1, 0x000F000F, 0x43004300, 0xEA;",
             torch.float16: "lop3.b32 $0, $1, 0x000F000F, 0x64006400, 0xEA;"}


@triton.jit
def _pairs(w, PAIR_PTX: tl.constexpr, OFFSET: tl.constexpr, PTX: tl.constexpr):
    """[..., 2] copies of a word shifted right by 4j -> its codes j and j + 4 as
    OFFSET + code in x's 16-bit float type (one LOP3 for the pair)."""
    if PTX:
        return tl.inline_asm_elementwise(PAIR_PTX, "=r,r,r", [w], dtype=tl.bfloat16
                                         if OFFSET == 128.0 else tl.float16,
                                         is_pure=True, pack=2)
    # the interpreter: the same values (int -> bf16 directly rounds wrongly there)
    h = tl.arange(0, 2)
    return (((w >> (16 * h)) & 0xF) + OFFSET).to(tl.float32).to(
        tl.bfloat16 if OFFSET == 128.0 else tl.float16)


@triton.jit
def _gemv_tc_kernel(
    x_ptr,        # [M, K] activations, M <= MAX_M
    qw_ptr,       # [K // 8, N] int32 codes
    scale_ptr,    # [num_groups, N]
    bias_ptr,     # [num_groups, N]
    out_ptr,      # [M, N] x's dtype
    ws_ptr,       # [>= M, N] fp32 zeros, left zero
    count_ptr,    # [>= N tiles] int32 zeros, left zero
    M, N, K,
    M_BUCKET,     # BLOCK_M: only the autotuner's key
    stride_xm, stride_qk, stride_sg, stride_om, stride_wm,
    GROUP_SIZE: tl.constexpr,
    BLOCK_M: tl.constexpr,        # 8 or 16: the MMA's columns (x's rows, masked past M)
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,           # word rows (8 K rows each) per chunk, in one group
    CHUNKS: tl.constexpr,         # chunks per program (fewer splits to sum)
    EVEN_N: tl.constexpr,
    PAIR_PTX: tl.constexpr,
    OFFSET: tl.constexpr,
    PTX: tl.constexpr,            # False: the interpreter (no PTX, no 16-bit dots)
):
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    mask_n = offs_n < N
    mask_m = offs_m < M
    kk = tl.arange(0, 2 * ROWS)
    part = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    for c in tl.static_range(CHUNKS):
        first = (pid_k * CHUNKS + c) * ROWS
        at_w = qw_ptr + (first + tl.arange(0, ROWS))[None, :] * stride_qk + offs_n[:, None]
        if EVEN_N:
            w = tl.load(at_w, eviction_policy="evict_first")
        else:
            w = tl.load(at_w, mask=mask_n[:, None], other=0, eviction_policy="evict_first")
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
        x_sum = tl.zeros((1, BLOCK_M), dtype=tl.float32)
        for j in tl.static_range(4):
            shifted = w >> (4 * j)   # (arithmetic: the bits it brings in stay above 19)
            a = _pairs(tl.join(shifted, shifted), PAIR_PTX, OFFSET, PTX)  # [BLOCK_N, ROWS, 2]
            a = tl.reshape(a, (BLOCK_N, 2 * ROWS))    # column 2r + h: K row 8r + j + 4h
            xk = 8 * (first + kk // 2) + j + 4 * (kk % 2)
            xt = tl.load(x_ptr + offs_m[None, :] * stride_xm + xk[:, None],
                         mask=mask_m[None, :], other=0.0)            # [2 ROWS, BLOCK_M]
            if PTX:
                acc = tl.dot(a, xt, acc)
            else:   # the interpreter's numpy cannot multiply 16-bit floats
                acc = tl.dot(a.to(tl.float32), xt.to(tl.float32), acc)
            x_sum += tl.sum(xt.to(tl.float32), axis=0)[None, :]
        at = (first * 8 // GROUP_SIZE) * stride_sg + offs_n
        scale = tl.load(scale_ptr + at, mask=mask_n, other=0.0).to(tl.float32)
        bias = tl.load(bias_ptr + at, mask=mask_n, other=0.0).to(tl.float32)
        part += (acc - OFFSET * x_sum) * scale[:, None] + x_sum * bias[:, None]
    sum_splits(part, out_ptr + offs_m[None, :] * stride_om + offs_n[:, None],
               ws_ptr + offs_m[None, :] * stride_wm + offs_n[:, None],
               mask_m[None, :] & mask_n[:, None], count_ptr + pid_n, tl.num_programs(1))


# (BLOCK_N, CHUNKS, num_warps), ROWS from the group size. Call 41 timed six configs of
# ROWS 16: 256 x 1 chunk x 4 warps was the best at 1-8 rows on all five Llama-3-8B shapes
# and 256 x 2 x 4 at sixteen; 512- and 1024-wide tiles lost 3-60%. The 128-wide ones are
# untimed neighbours the autotuner may pick (each compiles in ~1 s).
_CONFIGS = ((256, 1, 4), (256, 2, 4), (128, 1, 4), (128, 2, 4))
_TUNED: dict[int, object] = {}


def rows_for(group_size: int) -> int:
    """Word rows per chunk: a chunk lies in one group, and its 2 * ROWS K positions per
    code pair are the MMA's K (at least 16)."""
    return 16 if group_size % 128 == 0 else 8


def _tuned(group_size: int):
    tuned = _TUNED.get(group_size)
    if tuned is None:
        tuned = autotuned(_gemv_tc_kernel, [
            triton.Config({"BLOCK_N": n, "ROWS": rows_for(group_size), "CHUNKS": c},
                          num_warps=w, num_stages=1) for n, c, w in _CONFIGS])
        _TUNED[group_size] = tuned
    return tuned


def unsupported_reason(x: torch.Tensor, k: int, group_size: int, bits: int,
                       has_g_idx: bool) -> str | None:
    """Why this kernel cannot take the call (None: it can)."""
    return refusal(x, k, group_size, bits, has_g_idx, MAX_M, 64)


def launch(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor,
           biases: torch.Tensor, group_size: int,
           config: tuple[int, int, int] | None = None) -> torch.Tensor:
    """x [M, K] @ W -> new [M, N] in x's dtype, for arguments w4a16_gemm has checked and
    ``unsupported_reason`` takes (call ``w4a16_gemm(..., variant="gemv-tc")``).
    ``config``: (BLOCK_N, CHUNKS, num_warps) instead of the autotuner's choice."""
    m, k = x.shape
    n = qweight.shape[1]
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if n == 0:
        return out
    ws, counts = workspace(x.device, n)
    interpreted = is_interpreted(_gemv_tc_kernel)
    block_m = 8 if m <= 8 else 16
    rows = rows_for(group_size)
    kwargs = dict(GROUP_SIZE=group_size, BLOCK_M=block_m, PAIR_PTX=_PAIR_PTX[x.dtype],
                  OFFSET=_OFFSET[x.dtype], PTX=not interpreted)
    tuned = None if interpreted else _tuned(group_size)
    if interpreted and config is None:     # a narrow tile: several programs per N
        config = (32, 1, 4)
    if config is not None:
        block_n, chunks, warps = config
        if (k // 8) % (rows * chunks):
            raise ValueError(f"gemv-tc config {config}: {chunks} chunks of {rows} rows of "
                             f"words must divide K's {k // 8}")
        kwargs.update(BLOCK_N=block_n, ROWS=rows, CHUNKS=chunks, EVEN_N=n % block_n == 0)
        if not interpreted:
            kwargs.update(num_warps=warps, num_stages=1)
        tuned = None
    kernel = kernel_for(_gemv_tc_kernel, x.device, tuned=tuned)

    def grid(meta):
        check_tiles(triton.cdiv(n, meta["BLOCK_N"]), counts)
        return (triton.cdiv(n, meta["BLOCK_N"]), k // 8 // (meta["ROWS"] * meta["CHUNKS"]))
    kernel[grid](x, qweight, scales, biases, out, ws, counts, m, n, k, block_m,
                 x.stride(0), qweight.stride(0), scales.stride(0), out.stride(0),
                 ws.stride(0), **kwargs)
    return out
