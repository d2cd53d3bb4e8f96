"""W4A16 GEMM in the plain orientation, for decode batches of 33-64 rows and prefill-sized
calls: out [M, N] = x [M, K] @ W [K, N] with W as packed 4-bit codes (quant_layout.py),
fp16/bf16 activations, fp32 sums.

It joins the two kernels before it. From "dot" (w4a16_gemm.py) it takes the orientation:
x is the MMA's first operand and the weights its second, which the compiler stages
through shared memory, so a 64-row tile is one wgmma's M and the weights need no
register layout of their own. From "gemm-tc" (w4a16_gemm_tc.py) it takes the weights
finished in 16-bit arithmetic (per pair of codes one LOP3, two HFMA2: 1.5 instructions
per weight) instead of "dot"'s per-code shift, mask, conversion and fp32 FMA (8-9
instructions per weight executed on the H200, call 29), which bound "dot" by issuing
instructions rather than by the read.

The pair of codes one LOP3 yields are codes J and J + 4 of a word (K rows 8r + J and
8r + J + 4), so each chunk runs four dots, one per code position J, with x split in
registers into the same four positions (K is a sum: any order both operands share).
Up to MAX_M rows (split_k's workspace) run as one tile of M with K split over programs;
more rows run in tiles of M, each program over the whole of K.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from kubellm.kernels._launch import is_interpreted, kernel_for, row_bucket
from kubellm.kernels.split_k import MAX_M, check_tiles, sum_splits, workspace
from kubellm.kernels.w4a16_gemm_tc import _WEIGHT_ASM, _pairs_of, rows_for
from kubellm.kernels.w4a16_gemv import autotuned, refusal


@triton.jit
def _position_weights(words, scale, bias, J: tl.constexpr, DTYPE: tl.constexpr,
                      WEIGHT_ASM: tl.constexpr, PTX: tl.constexpr):
    """[ROWS, BLOCK_N] words -> [2 ROWS, BLOCK_N] weights c s + b in x's dtype of codes J
    and J + 4, row 2r + h holding K row 8r + J + 4h. ``scale``, ``bias``: [BLOCK_N]
    pairs of the group's 16-bit values (PTX) or its values (interpreter)."""
    shifted = words >> (4 * J)   # (arithmetic: the bits it brings in stay above 19)
    rows: tl.constexpr = shifted.shape[0]
    block_n: tl.constexpr = shifted.shape[1]
    if PTX:
        s = tl.broadcast_to(scale[None, :, None], (rows, block_n, 2))
        b = tl.broadcast_to(bias[None, :, None], (rows, block_n, 2))
        w = tl.inline_asm_elementwise(WEIGHT_ASM, "=r,r,r,r,r,r,r",
                                      [tl.join(shifted, shifted), s, b],
                                      dtype=DTYPE.value, is_pure=True, pack=2)
    else:   # the interpreter: the same values, rounded once from fp32
        h = tl.arange(0, 2)
        codes = ((tl.join(shifted, shifted) >> (16 * h)) & 0xF).to(tl.float32)
        w = (codes * scale[None, :, None] + bias[None, :, None]).to(DTYPE)
    return tl.reshape(tl.permute(w, (0, 2, 1)), (2 * rows, block_n))


@triton.jit
def _mma(acc, x, w, PTX: tl.constexpr):
    """acc [BLOCK_M, BLOCK_N] += x [BLOCK_M, K] @ w [K, BLOCK_N]."""
    if PTX:
        return tl.dot(x, w, acc)
    return tl.dot(x.to(tl.float32), w.to(tl.float32), acc)   # numpy has no 16-bit dots


@triton.jit
def _dot_tc_kernel(
    x_ptr,        # [M, K] activations
    qw_ptr,       # [K // 8, N] int32 codes
    scale_ptr,    # [num_groups, N]
    bias_ptr,     # [num_groups, N]
    out_ptr,      # [M, N] x's dtype
    ws_ptr,       # [>= M, N] fp32 zeros, left zero (SPLIT)
    count_ptr,    # [>= N tiles] int32 zeros, left zero (SPLIT)
    M, N, K,
    M_BUCKET,     # only the autotuner's key
    stride_xm, stride_qk, stride_sg, stride_om, stride_wm,
    GROUP_SIZE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,           # word rows (8 K rows each) per chunk, in one group
    CHUNKS: tl.constexpr,         # chunks per program (SPLIT; else all of K's)
    SPLIT: tl.constexpr,          # K split over programs (one M tile, M <= MAX_M)
    EVEN_N: tl.constexpr,
    WEIGHT_ASM: tl.constexpr,
    PTX: tl.constexpr,            # False: the interpreter (no PTX, no 16-bit dots)
):
    DTYPE: tl.constexpr = x_ptr.dtype.element_ty
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.program_id(2) * BLOCK_M + tl.arange(0, BLOCK_M)
    mask_n = offs_n < N
    mask_m = offs_m < M
    if SPLIT:
        lo = pid_k * CHUNKS
        hi = lo + CHUNKS
    else:
        lo = 0
        hi = K // (8 * ROWS)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for c in range(lo, hi):
        first = c * ROWS
        at_w = qw_ptr + (first + tl.arange(0, ROWS))[:, None] * stride_qk + offs_n[None, :]
        if EVEN_N:
            words = tl.load(at_w)
        else:
            words = tl.load(at_w, mask=mask_n[None, :], other=0)
        at = (first * 8 // GROUP_SIZE) * stride_sg + offs_n
        scale = tl.load(scale_ptr + at, mask=mask_n, other=0.0)
        bias = tl.load(bias_ptr + at, mask=mask_n, other=0.0)
        if PTX:
            scale = _pairs_of(scale)
            bias = _pairs_of(bias)
        else:
            scale = scale.to(tl.float32)
            bias = bias.to(tl.float32)
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + first * 8 +
                    tl.arange(0, 8 * ROWS)[None, :], mask=mask_m[:, None], other=0.0)
        # [BLOCK_M, ROWS, 2 (h), 2 (j1), 2 (j0)]: K row 8r + 4h + 2 j1 + j0, J = 2 j1 + j0
        even, odd = tl.split(tl.reshape(x, (BLOCK_M, ROWS, 2, 2, 2)))
        x0, x2 = tl.split(even)
        x1, x3 = tl.split(odd)
        acc = _mma(acc, tl.reshape(x0, (BLOCK_M, 2 * ROWS)),
                   _position_weights(words, scale, bias, 0, DTYPE, WEIGHT_ASM, PTX), PTX)
        acc = _mma(acc, tl.reshape(x1, (BLOCK_M, 2 * ROWS)),
                   _position_weights(words, scale, bias, 1, DTYPE, WEIGHT_ASM, PTX), PTX)
        acc = _mma(acc, tl.reshape(x2, (BLOCK_M, 2 * ROWS)),
                   _position_weights(words, scale, bias, 2, DTYPE, WEIGHT_ASM, PTX), PTX)
        acc = _mma(acc, tl.reshape(x3, (BLOCK_M, 2 * ROWS)),
                   _position_weights(words, scale, bias, 3, DTYPE, WEIGHT_ASM, PTX), PTX)
    out_at = out_ptr + offs_m[:, None] * stride_om + offs_n[None, :]
    mask = mask_m[:, None] & mask_n[None, :]
    if SPLIT:
        sum_splits(acc, out_at, ws_ptr + offs_m[:, None] * stride_wm + offs_n[None, :], mask,
                   count_ptr + pid_n, tl.num_programs(1))
    else:
        tl.store(out_at, acc.to(DTYPE), mask=mask)


# Split K (M <= MAX_M, BLOCK_M the launcher's): (BLOCK_N, CHUNKS, num_warps, num_stages);
# ROWS from the group size. Not yet timed: the spread a first run on the H200 chooses from.
_CONFIGS = ((128, 4, 4, 1), (128, 4, 4, 2), (128, 4, 4, 3), (128, 8, 4, 3), (64, 4, 4, 3),
            (128, 2, 4, 3), (256, 4, 8, 3), (256, 2, 8, 3), (64, 8, 4, 3))
# More rows (tiles of M, K whole): (BLOCK_N, BLOCK_M, num_warps, num_stages)
_LARGE_CONFIGS = ((128, 64, 4, 3), (128, 128, 8, 3), (256, 128, 8, 3), (128, 128, 4, 3),
                  (64, 128, 4, 3), (256, 64, 8, 3), (64, 64, 4, 3))
_TUNED: dict[tuple[int, bool], object] = {}


def _tuned(group_size: int, split: bool):
    tuned = _TUNED.get((group_size, split))
    if tuned is None:
        rows = rows_for(group_size)
        tuned = autotuned(_dot_tc_kernel, [
            triton.Config({"BLOCK_N": n, "ROWS": rows, "CHUNKS": c}, num_warps=w,
                          num_stages=s) for n, c, w, s in _CONFIGS] if split else [
            triton.Config({"BLOCK_N": n, "BLOCK_M": m, "ROWS": rows, "CHUNKS": 1},
                          num_warps=w, num_stages=s) for n, m, w, s in _LARGE_CONFIGS])
        _TUNED[(group_size, split)] = tuned
    return tuned


def unsupported_reason(x: torch.Tensor, k: int, group_size: int, bits: int,
                       has_g_idx: bool) -> str | None:
    """Why this kernel cannot take the call (None: it can; any number of rows)."""
    return refusal(x, k, group_size, bits, has_g_idx, x.shape[0], 64)


def launch(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor,
           biases: torch.Tensor, group_size: int,
           config: tuple | None = None) -> torch.Tensor:
    """x [M, K] @ W -> new [M, N] in x's dtype, for arguments w4a16_gemm has checked and
    ``unsupported_reason`` takes (call ``w4a16_gemm(..., variant="dot-tc")``). Up to
    MAX_M rows in one tile of M with K split over programs, more in tiles of M.
    ``config`` instead of the autotuner's choice: (BLOCK_N, CHUNKS, num_warps,
    num_stages) up to MAX_M rows, (BLOCK_N, BLOCK_M, num_warps, num_stages) beyond."""
    m, k = x.shape
    n = qweight.shape[1]
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if n == 0 or m == 0:
        return out
    split = m <= MAX_M
    ws, counts = workspace(x.device, n) if split else (out, out)
    interpreted = is_interpreted(_dot_tc_kernel)
    rows = rows_for(group_size)
    kwargs = dict(GROUP_SIZE=group_size, SPLIT=split, WEIGHT_ASM=_WEIGHT_ASM[x.dtype],
                  PTX=not interpreted)
    if split:
        kwargs["BLOCK_M"] = row_bucket(m)
    tuned = None if interpreted else _tuned(group_size, split)
    if interpreted and config is None:     # narrow tiles: several programs per N and M
        config = (32, 1, 4, 1) if split else (32, 32, 4, 1)
    if config is not None:
        block_n, second, warps, stages = config
        if split and (k // 8) % (rows * second):
            raise ValueError(f"dot-tc config {config}: {second} chunks of {rows} rows of "
                             f"words must divide K's {k // 8}")
        kwargs.update(BLOCK_N=block_n, ROWS=rows, EVEN_N=n % block_n == 0,
                      **(dict(CHUNKS=second) if split else dict(BLOCK_M=second, CHUNKS=1)))
        if not interpreted:
            kwargs.update(num_warps=warps, num_stages=stages)
        tuned = None
    kernel = kernel_for(_dot_tc_kernel, x.device, tuned=tuned)

    def grid(meta):
        n_tiles = triton.cdiv(n, meta["BLOCK_N"])
        if not split:
            return (n_tiles, 1, triton.cdiv(m, meta["BLOCK_M"]))
        check_tiles(n_tiles, counts)
        return (n_tiles, k // 8 // (meta["ROWS"] * meta["CHUNKS"]), 1)
    kernel[grid](x, qweight, scales, biases, out, ws, counts, m, n, k, row_bucket(m),
                 x.stride(0), qweight.stride(0), scales.stride(0), out.stride(0),
                 ws.stride(0), **kwargs)
    return out
