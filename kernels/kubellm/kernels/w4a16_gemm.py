"""W4A16 GEMM: out = x @ W with W held as packed 4-bit (or 8-bit) codes, dequantized inside
the K loop (quant_layout.py describes the layout); fp32 accumulation.

One kernel, two tunings: prefill (large M) tiles M and N and stores the output directly;
decode (M <= 64) also splits K over programs, so that a single row still spreads the
weight read over every SM. The programs of one output tile add their fp32 partial sums
atomically into a persistent workspace and count themselves in; the last one in writes
the output in x's dtype and leaves the workspace and its count zero for the next call
(split_k.sum_splits), so a decode call is one kernel, not zeros + GEMM + cast. On CUDA both
tunings are autotuned per (M bucket, N, K, bits, group size); the interpreter uses small
fixed tiles.

Tolerances against ``w4a16_gemm_ref`` (dequantize in fp32, round W to x's dtype, fp32
matmul): fp32 atol=rtol=1e-4, fp16 2e-3, bf16 2e-2 (summation order and one rounding of
the output; the split-K sum adds one more fp32 rounding per split).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from kubellm.kernels import w4a16_dequant, w4a16_gemm_tc, w4a16_gemv, w4a16_gemv_tc
from kubellm.kernels._launch import (FLOAT_DTYPES, check_tensor, is_interpreted, kernel_for,
                                     row_bucket)
from kubellm.kernels.quant_layout import codes_per_word, dequantize
from kubellm.kernels.split_k import MAX_M as DECODE_MAX_M
from kubellm.kernels.split_k import check_tiles, sum_splits, workspace

TOLERANCES = {torch.float32: (1e-4, 1e-4), torch.float16: (2e-3, 2e-3),
              torch.bfloat16: (2e-2, 2e-2)}


@triton.jit
def _w4a16_kernel(
    x_ptr,        # [M, K] activations
    qw_ptr,       # [K // PACK, N] int32 codes
    scale_ptr,    # [num_groups, N]
    bias_ptr,     # [num_groups, N]
    gidx_ptr,     # [K] int32 group of each row (HAS_G_IDX)
    out_ptr,      # [M, N]: x's dtype, or fp32 zeros summed into atomically (SUM "atomic")
    ws_ptr,       # [>= M, N] fp32 zeros, left zero (SUM "workspace")
    count_ptr,    # [>= M tiles * N tiles] int32 zeros, left zero (SUM "workspace")
    M, N, K,
    M_BUCKET,     # next power of two of M: only the autotuner's key
    stride_xm, stride_qk, stride_sg, stride_om, stride_wm,
    BITS: tl.constexpr,
    GROUP_SIZE: tl.constexpr,
    HAS_G_IDX: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SPLIT_K: tl.constexpr,
    SUM: tl.constexpr,            # "store" (no split), "workspace" or "atomic" (split-K)
    DOT_FP32: tl.constexpr,       # interpreter only: numpy cannot multiply bf16
    DOT_PRECISION: tl.constexpr,
    ROW_WORDS: tl.constexpr,      # unpack: each K row loads its own word (no reshape)
):
    PACK: tl.constexpr = 32 // BITS
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    pid_k = tl.program_id(2)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < N
    num_tiles = tl.cdiv(K, BLOCK_K)
    per_split = tl.cdiv(num_tiles, SPLIT_K)
    first = pid_k * per_split
    last = tl.minimum(first + per_split, num_tiles)
    shifts = tl.arange(0, PACK) * BITS
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for t in range(first, last):
        offs_k = t * BLOCK_K + tl.arange(0, BLOCK_K)
        mask_k = offs_k < K
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :],
                    mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        if ROW_WORDS:   # the PACK rows of a word load it PACK times (from L1): no reshape
            words = tl.load(qw_ptr + (offs_k // PACK)[:, None] * stride_qk + offs_n[None, :],
                            mask=mask_k[:, None] & mask_n[None, :], other=0)
            codes = ((words >> ((offs_k % PACK) * BITS)[:, None]) & ((1 << BITS) - 1)
                     ).to(tl.float32)
        else:
            offs_w = t * (BLOCK_K // PACK) + tl.arange(0, BLOCK_K // PACK)
            words = tl.load(qw_ptr + offs_w[:, None] * stride_qk + offs_n[None, :],
                            mask=(offs_w[:, None] < K // PACK) & mask_n[None, :], other=0)
            codes = (words[:, None, :] >> shifts[None, :, None]) & ((1 << BITS) - 1)
            codes = tl.reshape(codes, (BLOCK_K, BLOCK_N)).to(tl.float32)
        if HAS_G_IDX:
            g = tl.load(gidx_ptr + offs_k, mask=mask_k, other=0)
            at = g[:, None] * stride_sg + offs_n[None, :]
            both = mask_k[:, None] & mask_n[None, :]
            w = codes * tl.load(scale_ptr + at, mask=both, other=0.0).to(tl.float32) + \
                tl.load(bias_ptr + at, mask=both, other=0.0).to(tl.float32)
        elif GROUP_SIZE % BLOCK_K == 0:   # the whole tile in one group: one row of each
            at = (t * BLOCK_K // GROUP_SIZE) * stride_sg + offs_n
            w = codes * tl.load(scale_ptr + at, mask=mask_n, other=0.0).to(tl.float32)[None, :] \
                + tl.load(bias_ptr + at, mask=mask_n, other=0.0).to(tl.float32)[None, :]
        else:
            at = (offs_k // GROUP_SIZE)[:, None] * stride_sg + offs_n[None, :]
            both = mask_k[:, None] & mask_n[None, :]
            w = codes * tl.load(scale_ptr + at, mask=both, other=0.0).to(tl.float32) + \
                tl.load(bias_ptr + at, mask=both, other=0.0).to(tl.float32)
        if DOT_FP32:
            acc += tl.dot(x.to(tl.float32), w.to(x.dtype).to(tl.float32))
        else:
            acc += tl.dot(x, w.to(x.dtype), input_precision=DOT_PRECISION)
    out_at = out_ptr + offs_m[:, None] * stride_om + offs_n[None, :]
    mask = mask_m[:, None] & mask_n[None, :]
    if SUM == "atomic":   # the old decode path ("dot-zeros"): the launcher zeros and casts
        tl.atomic_add(out_at, acc, mask=mask, sem="relaxed")
    elif SUM == "store" or SPLIT_K == 1:
        tl.store(out_at, acc.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        sum_splits(acc, out_at, ws_ptr + offs_m[:, None] * stride_wm + offs_n[None, :],
                    mask, count_ptr + pid_m * tl.num_programs(0) + pid_n, SPLIT_K)


def _configs(decode: bool):
    if decode:   # weight-read bound: wide N tiles, K split to occupy every SM; BLOCK_M is
        # the launcher's (every row of the batch in one tile: the weights are read once)
        return [triton.Config({"BLOCK_N": n, "BLOCK_K": k, "SPLIT_K": s},
                              num_warps=w, num_stages=st)
                for n, k, s, w, st in ((64, 128, 1, 4, 3), (128, 128, 1, 4, 3),
                                       (64, 128, 2, 4, 3), (128, 128, 2, 4, 3),
                                       (64, 128, 4, 4, 3), (128, 64, 4, 4, 4),
                                       (64, 256, 4, 4, 3), (128, 128, 8, 4, 3),
                                       (64, 128, 8, 4, 4), (256, 64, 4, 8, 3),
                                       (128, 256, 2, 8, 3), (64, 64, 16, 4, 4),
                                       (128, 128, 16, 4, 3), (64, 128, 32, 4, 2))]
    return [triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "SPLIT_K": 1},
                          num_warps=w, num_stages=st)
            for m, n, k, w, st in ((64, 128, 64, 4, 3), (128, 128, 64, 8, 3),
                                   (128, 256, 64, 8, 3), (64, 256, 64, 4, 4),
                                   (128, 128, 128, 8, 3), (128, 64, 64, 4, 4))]


_KEY = ["M_BUCKET", "N", "K", "BITS", "GROUP_SIZE", "HAS_G_IDX", "ROW_WORDS"]
# the workspace path leaves its buffers as it found them, so tuning runs need no reset;
# "dot-zeros" sums into its output, which each tuning run must find zero
_decode_tuned = triton.autotune(configs=_configs(True), key=_KEY)(_w4a16_kernel)
_decode_zeros_tuned = triton.autotune(configs=_configs(True), key=_KEY,
                                      reset_to_zero=["out_ptr"])(_w4a16_kernel)
_prefill_tuned = triton.autotune(configs=_configs(False), key=_KEY)(_w4a16_kernel)
# "gemv": w4a16_gemv.py (no tensor cores; M <= GEMV_MAX_M, fp16/bf16, 4-bit, no g_idx);
# "dot": tensor-core tiles, codes unpacked by a reshape; "dot-rows": the same tiles, each K
# row loading its own word; "dot-zeros": "dot" as it was before the workspace (fp32 zeros
# per decode call, relaxed atomic adds into them, a cast to x's dtype after: three
# kernels), kept to A/B the two. History on the H200 (CUDA-graph replays, Llama-3-8B
# projections): relaxed atomics and splits of 16-32 took "dot" at 4096x6144, 1 / 4 / 16 /
# 64 rows, from 24.3 / 25.4 / 26.2 / 34.4 us to 16.4 / 17.7 / 18.1 / 22.8 (2026-12-02);
# 8-bit codes (twice the bytes) took only 1.05-1.2x the 4-bit time, and ncu (call 29,
# 2026-12-02 s11) showed why: "dot" and the first gemv kernels executed 8-9 instructions
# per weight and read DRAM at 18-24% of its peak -- bound by issuing instructions, not
# by the read. Codes made bf16 by integer ops with the scale after the dot, and a dot per
# code position, lost to "dot" (1.1-1.5x and 1.2-3.9x slower) and were removed.
VARIANTS = ("gemv", "gemv-tc", "gemm-tc", "dot", "dot-rows", "dot-zeros", "dequant")
DEFAULT_VARIANT = "dot"   # the dot kernel's tiling follows M (decode or prefill) ...
GEMV_MAX_M = w4a16_gemv.MAX_M  # ... but calls of few rows that a GEMV kernel takes go to it:
# one row to "gemv" (FFMA), which beat "dot" at 1-2 rows on every shape (call 30: 1.6-2.5x
# at one row) and "gemv-tc" at one row (call 41: by 4-16%) ...
GEMV_DEFAULT_MAX_M = 1
# ... 2-8 rows to "gemv-tc" (w4a16_gemv_tc.py, which takes up to GEMV_TC_MAX_M; call 41:
# 1.15-1.26x the FFMA GEMV at two rows, 1.45-2.0x at four, 1.5-1.7x "dot" at eight; call
# 45: 1.06-1.3x "gemm-tc" at eight) ...
GEMV_TC_MAX_M = w4a16_gemv_tc.MAX_M
GEMV_TC_DEFAULT_MAX_M = 8
# ... and 9-32 rows to "gemm-tc" (w4a16_gemm_tc.py, the weights finished in 16-bit before
# the MMA; calls 44-45: 1.0-1.2x "gemv-tc" at sixteen rows, 1.25-1.5x "dot" at 32; at 48-64
# rows and past them it won on some shapes and lost on others, 0.70-1.37x "dot")
GEMM_TC_DEFAULT_MAX_M = 32
# the variants with a module of their own (unsupported_reason, launch) -- the GEMVs and
# gemm-tc -- and the most rows each takes by default, in the order the default tries them
GEMVS = {"gemv": (w4a16_gemv, GEMV_DEFAULT_MAX_M),
         "gemv-tc": (w4a16_gemv_tc, GEMV_TC_DEFAULT_MAX_M),
         "gemm-tc": (w4a16_gemm_tc, GEMM_TC_DEFAULT_MAX_M)}


# Calls of DEQUANT_DEFAULT_MIN_M rows or more go to "dequant" (w4a16_dequant.py: W written
# out in x's dtype, then cuBLAS), which takes every call. Call 48 (s16), Llama-3-8B's four
# projections: past 64 rows "dot" leaves its split-K decode tiles, and at 128 rows
# "dequant" took 0.47-0.63x the time of "dot" and "gemm-tc" on three of them (gate+up:
# 1.4x "dot"; per layer 288 against 405 us); from 256 rows it won at every shape (0.37-0.8x
# the best other), at 1.10-1.17x bf16 cuBLAS's time at 8192 rows
DEQUANT_DEFAULT_MIN_M = DECODE_MAX_M + 1


def default_variant(x: torch.Tensor, k: int, group_size: int, bits: int,
                    has_g_idx: bool) -> str:
    """The variant ``w4a16_gemm`` runs when none is named: "dequant" from
    DEQUANT_DEFAULT_MIN_M rows, else the first GEMV that takes the call within its
    default row limit, else DEFAULT_VARIANT."""
    if x.shape[0] >= DEQUANT_DEFAULT_MIN_M:
        return "dequant"
    for name, (kernel_module, most) in GEMVS.items():
        if x.shape[0] <= most and kernel_module.unsupported_reason(
                x, k, group_size, bits, has_g_idx) is None:
            return name
    return DEFAULT_VARIANT


def _check(x, qweight, scales, biases, group_size, bits, g_idx):
    check_tensor("x", x, 2, FLOAT_DTYPES)
    check_tensor("qweight", qweight, 2, (torch.int32,), x.device, last_dim_contiguous=True)
    pack = codes_per_word(bits)
    k, n = x.shape[1], qweight.shape[1]
    if qweight.shape[0] * pack != k:
        raise ValueError(f"qweight has {qweight.shape[0]} rows of {pack} codes for "
                         f"x's K={k}")
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group_size must be a positive int, got {group_size!r}")
    groups = scales.shape[0] if g_idx is not None else -(-k // group_size)
    for name, t in (("scales", scales), ("biases", biases)):
        check_tensor(name, t, 2, FLOAT_DTYPES, x.device)
        if tuple(t.shape) != (groups, n) and g_idx is None:
            raise ValueError(f"{name} must have shape {(groups, n)}, got {tuple(t.shape)}")
    if biases.shape != scales.shape or biases.stride() != scales.stride():
        raise ValueError("scales and biases must have the same shape and strides")
    if g_idx is not None:
        check_tensor("g_idx", g_idx, 1, (torch.int32,), x.device)
        if g_idx.shape[0] != k:
            raise ValueError(f"g_idx must have K={k} entries, got {g_idx.shape[0]}")


def w4a16_gemm(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor,
               biases: torch.Tensor, group_size: int, bits: int = 4,
               g_idx: torch.Tensor | None = None, variant: str | None = None) -> torch.Tensor:
    """x [M, K] (last dim contiguous) @ W -> new [M, N] in x's dtype. ``variant`` (one of
    VARIANTS) picks the kernel; None is "gemv" for calls of at most GEMV_DEFAULT_MAX_M rows
    that it takes, "gemv-tc" for those of at most GEMV_TC_DEFAULT_MAX_M that it takes,
    "gemm-tc" for those of at most GEMM_TC_DEFAULT_MAX_M, "dequant" for those of at least
    DEQUANT_DEFAULT_MIN_M, else DEFAULT_VARIANT."""
    _check(x, qweight, scales, biases, group_size, bits, g_idx)
    m, k = x.shape
    n = qweight.shape[1]
    named = variant is not None
    if not named:
        variant = default_variant(x, k, group_size, bits, g_idx is not None)
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    decode = m <= DECODE_MAX_M
    if m == 0 or n == 0:
        return torch.zeros((m, n), dtype=x.dtype, device=x.device)
    if variant in GEMVS:
        kernel_module = GEMVS[variant][0]
        # (the default chose a GEMV that takes the call; a named one may not)
        why_not = named and kernel_module.unsupported_reason(x, k, group_size, bits,
                                                             g_idx is not None)
        if why_not:
            raise ValueError(f"the {variant} variant does not take {why_not}")
        return kernel_module.launch(x, qweight, scales, biases, group_size)
    if variant == "dequant":
        return w4a16_dequant.launch(x, qweight, scales, biases, group_size, bits, g_idx)
    zeros = decode and variant == "dot-zeros"
    out = torch.zeros((m, n), dtype=torch.float32, device=x.device) if zeros else \
        torch.empty((m, n), dtype=x.dtype, device=x.device)
    ws, counts = workspace(x.device, n) if decode and not zeros else (out, out)
    interpreted = is_interpreted(_w4a16_kernel)
    kernel = kernel_for(_w4a16_kernel, x.device, tuned=_prefill_tuned if not decode else
                        _decode_zeros_tuned if zeros else _decode_tuned)
    kwargs = dict(BITS=bits, GROUP_SIZE=group_size, HAS_G_IDX=g_idx is not None,
                  SUM="store" if not decode else "atomic" if zeros else "workspace",
                  DOT_FP32=interpreted and x.dtype == torch.bfloat16,
                  DOT_PRECISION="ieee" if x.dtype == torch.float32 else "tf32",
                  ROW_WORDS=variant == "dot-rows")
    if interpreted:   # small fixed tiles keep CPU tests fast; K splits test the sum
        kwargs.update(_INTERPRETED_TILES, SPLIT_K=_INTERPRETED_TILES["SPLIT_K"] if decode
                      else 1)
    elif decode:
        kwargs["BLOCK_M"] = row_bucket(m)

    def grid(meta):
        tiles = (triton.cdiv(n, meta["BLOCK_N"]), triton.cdiv(m, meta["BLOCK_M"]))
        if meta["SUM"] == "workspace":
            check_tiles(tiles[0] * tiles[1], counts)
        return (*tiles, meta["SPLIT_K"])
    kernel[grid](x, qweight, scales, biases, g_idx if g_idx is not None else qweight, out,
                 ws, counts, m, n, k, row_bucket(m), x.stride(0), qweight.stride(0),
                 scales.stride(0), out.stride(0), ws.stride(0), **kwargs)
    return out.to(x.dtype) if zeros else out


# the interpreter's fixed tiles (tests may change SPLIT_K, e.g. to leave a split empty)
_INTERPRETED_TILES = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "SPLIT_K": 2}


def w4a16_gemm_ref(x, qweight, scales, biases, group_size, bits=4, g_idx=None):
    w = dequantize(qweight, scales, biases, group_size, bits, g_idx, dtype=x.dtype)
    return (x.float() @ w.float()).to(x.dtype)
