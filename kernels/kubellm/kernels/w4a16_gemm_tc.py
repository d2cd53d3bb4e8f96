"""W4A16 GEMM on tensor cores, for decode at mid and large batch sizes: out = x @ W with W
as packed 4-bit codes (quant_layout.py), fp16/bf16 activations, fp32 sums.

The tensor-core GEMV (w4a16_gemv_tc.py) turns codes into 16-bit floats (OFFSET + c, one
LOP3 per pair) and applies each group's scale and bias to its sums; that epilogue and the
per-group sums of x grow with the rows, so past 16 rows it costs more than the MMAs. Here
the weights themselves are finished in 16-bit arithmetic before the MMA: per pair of codes
one LOP3 (OFFSET + c), one HFMA2 (minus OFFSET: c exactly) and one HFMA2 (c s + b, rounded
once, as the reference rounds W to x's dtype) -- 1.5 instructions per weight whatever the
row count -- and the fp32 sums run over the whole K range of a program.

The product runs transposed as in the GEMV -- out^T [N, M] = W^T [N, K] x^T [K, M] -- so
the weights are the MMA's register operand and x's rows its columns. x is loaded in its
own K order (16-byte loads) and either split in registers into the four code positions
of a pair (K offsets j and j + 4 within a word) that the weights come in, a dot each, or
(ONE_DOT) the four positions' weights are joined back into x's K order for one dot per
chunk (the join goes through shared memory; calls 44-45 timed both). Up to MAX_M rows (split_k's
workspace) run as one tile of M with K split over programs (split_k.sum_splits), so a few
output tiles still spread the weight read over every SM; more rows run in tiles of M,
each program over the whole of K.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from kubellm.kernels._launch import is_interpreted, kernel_for, row_bucket
from kubellm.kernels.split_k import MAX_M, check_tiles, sum_splits, workspace
from kubellm.kernels.w4a16_gemv import autotuned, refusal

# per dtype: OFFSET's bits (OR-ed with a code pair), 1.0 and -OFFSET as pairs
_ASM = """{{
 .reg .b32 t, one, minus;
 mov.b32 one, {one};
 mov.b32 minus, {minus};
 lop3.b32 t, $1, 0x000F000F, {offset}, 0xEA;
 fma.rn.{pair} t, t, one, minus;
 fma.rn.{pair} $0, t, $3, $5;
}}"""
_WEIGHT_ASM = {
    torch.bfloat16: _ASM.format(one="0x3F803F80", minus="0xC300C300", offset="0x43004300",
                                pair="bf16x2"),
    torch.float16: _ASM.format(one="0x3C003C00", minus="0xE400E400", offset="0x64006400",
                               pair="f16x2"),
}


@triton.jit
def _pairs_of(bits16):
    """[BLOCK_N] 16-bit floats -> int32 words holding the value twice."""
    low = bits16.to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF
    return low | (low << 16)


@triton.jit
def _weights(words, scale, bias, J: tl.constexpr, ROWS: tl.constexpr, DTYPE: tl.constexpr,
             WEIGHT_ASM: tl.constexpr, PTX: tl.constexpr):
    """[BLOCK_N, ROWS] words -> [BLOCK_N, ROWS, 2] weights c s + b in x's dtype of codes J
    and J + 4 (K rows 8r + J + 4h). ``scale``, ``bias``: [BLOCK_N] pairs of the group's
    16-bit values (PTX) or its values (interpreter)."""
    shifted = words >> (4 * J)   # (arithmetic: the bits it brings in stay above 19)
    block_n: tl.constexpr = shifted.shape[0]
    if PTX:
        s = tl.broadcast_to(scale[:, None, None], (block_n, ROWS, 2))
        b = tl.broadcast_to(bias[:, None, None], (block_n, ROWS, 2))
        return tl.inline_asm_elementwise(WEIGHT_ASM, "=r,r,r,r,r,r,r",
                                         [tl.join(shifted, shifted), s, b],
                                         dtype=DTYPE.value, is_pure=True, pack=2)
    # the interpreter: the same values, rounded once from fp32
    h = tl.arange(0, 2)
    codes = ((tl.join(shifted, shifted) >> (16 * h)) & 0xF).to(tl.float32)
    return (codes * scale[:, None, None] + bias[:, None, None]).to(DTYPE)


@triton.jit
def _gemm_tc_kernel(
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
    BLOCK_M: tl.constexpr,        # the MMA's columns (x's rows, masked past M)
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,           # word rows (8 K rows each) per chunk, in one group
    CHUNKS: tl.constexpr,         # chunks per program (SPLIT; else all of K's)
    SPLIT: tl.constexpr,          # K split over programs (one M tile, M <= MAX_M)
    ONE_DOT: tl.constexpr,        # one dot per chunk, weights joined into x's K order
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
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    for c in range(lo, hi):
        first = c * ROWS
        at_w = qw_ptr + (first + tl.arange(0, ROWS))[None, :] * stride_qk + offs_n[:, None]
        if EVEN_N:
            words = tl.load(at_w, eviction_policy="evict_first")
        else:
            words = tl.load(at_w, mask=mask_n[:, None], other=0, eviction_policy="evict_first")
        at = (first * 8 // GROUP_SIZE) * stride_sg + offs_n
        scale = tl.load(scale_ptr + at, mask=mask_n, other=0.0)
        bias = tl.load(bias_ptr + at, mask=mask_n, other=0.0)
        if PTX:
            scale = _pairs_of(scale)
            bias = _pairs_of(bias)
        else:
            scale = scale.to(tl.float32)
            bias = bias.to(tl.float32)
        w0 = _weights(words, scale, bias, 0, ROWS, DTYPE, WEIGHT_ASM, PTX)
        w1 = _weights(words, scale, bias, 1, ROWS, DTYPE, WEIGHT_ASM, PTX)
        w2 = _weights(words, scale, bias, 2, ROWS, DTYPE, WEIGHT_ASM, PTX)
        w3 = _weights(words, scale, bias, 3, ROWS, DTYPE, WEIGHT_ASM, PTX)
        if ONE_DOT:   # [BLOCK_N, ROWS, 2 (h), 2 (j1), 2 (j0)]: K row 8r + 4h + 2 j1 + j0
            w = tl.reshape(tl.join(tl.join(w0, w2), tl.join(w1, w3)), (BLOCK_N, 8 * ROWS))
            xt = tl.load(x_ptr + offs_m[None, :] * stride_xm + first * 8 +
                         tl.arange(0, 8 * ROWS)[:, None], mask=mask_m[None, :], other=0.0)
            acc = _mma(acc, w, xt, PTX)
        else:         # a dot per code position j, x split in registers into the four
            x = tl.load(x_ptr + offs_m[:, None] * stride_xm + first * 8 +
                        tl.arange(0, 8 * ROWS)[None, :], mask=mask_m[:, None], other=0.0)
            even, odd = tl.split(tl.reshape(x, (BLOCK_M, ROWS, 2, 2, 2)))
            x0, x2 = tl.split(even)
            x1, x3 = tl.split(odd)
            acc = _mma(acc, tl.reshape(w0, (BLOCK_N, 2 * ROWS)),
                       tl.trans(tl.reshape(x0, (BLOCK_M, 2 * ROWS))), PTX)
            acc = _mma(acc, tl.reshape(w1, (BLOCK_N, 2 * ROWS)),
                       tl.trans(tl.reshape(x1, (BLOCK_M, 2 * ROWS))), PTX)
            acc = _mma(acc, tl.reshape(w2, (BLOCK_N, 2 * ROWS)),
                       tl.trans(tl.reshape(x2, (BLOCK_M, 2 * ROWS))), PTX)
            acc = _mma(acc, tl.reshape(w3, (BLOCK_N, 2 * ROWS)),
                       tl.trans(tl.reshape(x3, (BLOCK_M, 2 * ROWS))), PTX)
    out_at = out_ptr + offs_m[None, :] * stride_om + offs_n[:, None]
    mask = mask_m[None, :] & mask_n[:, None]
    if SPLIT:
        sum_splits(acc, out_at, ws_ptr + offs_m[None, :] * stride_wm + offs_n[:, None], mask,
                   count_ptr + pid_n, tl.num_programs(1))
    else:
        tl.store(out_at, acc.to(DTYPE), mask=mask)


@triton.jit
def _mma(acc, w, xt, PTX: tl.constexpr):
    """acc [BLOCK_N, BLOCK_M] += w [BLOCK_N, K] @ xt [K, BLOCK_M]."""
    if PTX:
        return tl.dot(w, xt, acc)
    return tl.dot(w.to(tl.float32), xt.to(tl.float32), acc)   # numpy has no 16-bit dots


# Split K (M <= MAX_M, BLOCK_M the launcher's): (BLOCK_N, CHUNKS, num_warps, num_stages,
# ONE_DOT); ROWS from the group size. Calls 44-45 timed nine alone at 8-64 rows: these
# five were the best at 9-32 rows on every Llama-3-8B shape (ONE_DOT only at 4096x4096).
_CONFIGS = ((128, 4, 4, 1, False), (128, 8, 4, 1, False), (64, 4, 4, 1, False),
            (128, 2, 4, 1, False), (64, 4, 4, 2, True))
# More rows (tiles of M, K whole): (BLOCK_N, BLOCK_M, num_warps, num_stages, ONE_DOT), the
# best two of seven at 128-1024 rows (call 45)
_LARGE_CONFIGS = ((128, 128, 8, 2, True), (256, 128, 8, 1, False))
_TUNED: dict[tuple[int, bool], object] = {}


def rows_for(group_size: int) -> int:
    """Word rows per chunk: a chunk lies in one group (2 ROWS: the MMA's K, >= 16)."""
    return 16 if group_size % 128 == 0 else 8


def _tuned(group_size: int, split: bool):
    tuned = _TUNED.get((group_size, split))
    if tuned is None:
        rows = rows_for(group_size)
        tuned = autotuned(_gemm_tc_kernel, [
            triton.Config({"BLOCK_N": n, "ROWS": rows, "CHUNKS": c, "ONE_DOT": one},
                          num_warps=w, num_stages=s) for n, c, w, s, one in _CONFIGS]
            if split else [
            triton.Config({"BLOCK_N": n, "BLOCK_M": m, "ROWS": rows, "CHUNKS": 1,
                           "ONE_DOT": one}, num_warps=w, num_stages=s)
            for n, m, w, s, one in _LARGE_CONFIGS])
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
    ``unsupported_reason`` takes (call ``w4a16_gemm(..., variant="gemm-tc")``). Up to
    MAX_M rows in one tile of M with K split over programs, more in tiles of M.
    ``config`` instead of the autotuner's choice: (BLOCK_N, CHUNKS, num_warps,
    num_stages, ONE_DOT) up to MAX_M rows, (BLOCK_N, BLOCK_M, num_warps, num_stages,
    ONE_DOT) beyond (ONE_DOT may be left out: False)."""
    m, k = x.shape
    n = qweight.shape[1]
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if n == 0 or m == 0:
        return out
    split = m <= MAX_M
    ws, counts = workspace(x.device, n) if split else (out, out)
    interpreted = is_interpreted(_gemm_tc_kernel)
    rows = rows_for(group_size)
    kwargs = dict(GROUP_SIZE=group_size, SPLIT=split, WEIGHT_ASM=_WEIGHT_ASM[x.dtype],
                  PTX=not interpreted)
    if split:
        kwargs["BLOCK_M"] = row_bucket(m)
    tuned = None if interpreted else _tuned(group_size, split)
    if interpreted and config is None:     # narrow tiles: several programs per N and M
        config = (32, 1, 4, 1) if split else (32, 32, 4, 1)
    if config is not None:
        block_n, second, warps, stages, one_dot = (*config, False)[:5]
        if split and (k // 8) % (rows * second):
            raise ValueError(f"gemm-tc config {config}: {second} chunks of {rows} rows of "
                             f"words must divide K's {k // 8}")
        kwargs.update(BLOCK_N=block_n, ROWS=rows, EVEN_N=n % block_n == 0, ONE_DOT=one_dot,
                      **(dict(CHUNKS=second) if split else dict(BLOCK_M=second, CHUNKS=1)))
        if not interpreted:
            kwargs.update(num_warps=warps, num_stages=stages)
        tuned = None
    kernel = kernel_for(_gemm_tc_kernel, x.device, tuned=tuned)

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
