"""W4A16 GEMM: out = x @ W with W held as packed 4-bit (or 8-bit) codes, dequantized inside
the K loop (quant_layout.py describes the layout); fp32 accumulation.

One kernel, two tunings: prefill (large M) tiles M and N and stores the output directly;
decode (M <= 64) also splits K over programs, so that a single row still spreads the
weight read over every SM. The programs of one output tile add their fp32 partial sums
atomically into a persistent workspace and count themselves in; the last one in writes
the output in x's dtype and leaves the workspace and its count zero for the next call
(``_sum_splits``), so a decode call is one kernel, not zeros + GEMM + cast. On CUDA both
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

from kubellm.kernels._launch import FLOAT_DTYPES, check_tensor, is_interpreted, kernel_for
from kubellm.kernels.quant_layout import codes_per_word, dequantize

TOLERANCES = {torch.float32: (1e-4, 1e-4), torch.float16: (2e-3, 2e-3),
              torch.bfloat16: (2e-2, 2e-2)}
DECODE_MAX_M = 64


@triton.jit
def _codes_to_float(codes):
    """Small non-negative int32 codes -> fp32 without an int-to-float conversion (a
    quarter-rate instruction): OR-ing a code into the mantissa of 2**23 gives the float
    2**23 + code exactly; one subtraction removes 2**23. In the dot kernel it changed
    nothing measurable on the H200 (benchmarks/results, w4a16 variants), so only the gemv
    kernel, whose loop is all ALU work, uses it."""
    return (codes | 0x4B000000).to(tl.float32, bitcast=True) - 8388608.0


@triton.jit
def _sum_splits(part, out_at, ws_at, mask, count_at, num_splits):
    """Add this program's fp32 partial tile into the workspace tile, then count the
    program in; the one that counts last (num_splits - 1 before it) writes the sum to
    the output in its dtype and zeros the workspace tile and the count for the next call.

    The partial sums need no order among themselves (relaxed adds), but must all be in
    the workspace before the last program reads it: the barrier puts every thread's adds
    before the count (one thread makes it), whose release publishes them; its acquire
    in the last program, and loads that skip L1 (.cg: L1 is not coherent), see them.
    The second barrier keeps a thread's zeros from landing before another thread that
    holds a copy of the same element has loaded it. No program waits for another, so the
    kernel cannot hang whatever order the programs run in (the interpreter runs them one
    after another)."""
    tl.atomic_add(ws_at, part, mask=mask, sem="relaxed")
    tl.debug_barrier()
    if tl.atomic_add(count_at, 1, sem="acq_rel") == num_splits - 1:
        total = tl.load(ws_at, mask=mask, other=0.0, cache_modifier=".cg")
        tl.store(out_at, total.to(out_at.dtype.element_ty), mask=mask)
        tl.debug_barrier()
        tl.store(ws_at, tl.zeros_like(total), mask=mask)
        tl.store(count_at, 0)


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
        _sum_splits(acc, out_at, ws_ptr + offs_m[:, None] * stride_wm + offs_n[None, :],
                    mask, count_ptr + pid_m * tl.num_programs(0) + pid_n, SPLIT_K)


@triton.jit
def _w4a16_gemv_kernel(
    x_ptr,        # [M, K] activations, M <= GEMV_MAX_M
    qw_ptr,       # [K // PACK, N] int32 codes
    scale_ptr,    # [num_groups, N]
    bias_ptr,     # [num_groups, N]
    gidx_ptr,     # [K] int32 group of each row (HAS_G_IDX)
    out_ptr,      # [M, N] x's dtype
    ws_ptr,       # [>= M, N] fp32 zeros, left zero
    count_ptr,    # [>= N tiles] int32 zeros, left zero
    M, N, K,
    M_BUCKET,     # next power of two of M: only the autotuner's key
    stride_xm, stride_qk, stride_sg, stride_om, stride_wm,
    BITS: tl.constexpr,
    GROUP_SIZE: tl.constexpr,
    HAS_G_IDX: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_KW: tl.constexpr,       # packed words per tile along K (BLOCK_KW * PACK rows)
    TILES: tl.constexpr,          # K tiles per program
):
    """A few rows: no tensor-core tile to fill (a dot pads M to 16 and needs the codes in
    its operand layout), so each word's PACK codes are unpacked in place and multiplied
    with the matching K rows of x, summed over K in fp32. Where a tile lies in one group,
    sum_k x_k (c_k s + b) = s sum_k x_k c_k + b sum_k x_k: one scale and bias per tile.

    A program takes only TILES tiles of K (1-4), so K is split over many programs: with
    one row the loop's loads are not pipelined, and it is the number of programs resident
    on each SM, each with its tile in flight, that keeps enough bytes on the way from
    memory (an earlier version split K in 2-16 parts of up to 16 tiles and read weights
    at 0.17 of the copy bandwidth). The weights are read once (evict first); the partial
    sums meet in the workspace as in the dot kernel (``_sum_splits``)."""
    PACK: tl.constexpr = 32 // BITS
    BLOCK_K: tl.constexpr = BLOCK_KW * PACK
    CODE_MASK: tl.constexpr = (1 << BITS) - 1
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    mask_n = offs_n < N
    mask_m = offs_m < M
    # [rows, K words, N] partial sums: each thread keeps its own until after the K loop
    # (a reduction over K per tile moved data between threads every iteration)
    acc = tl.zeros((BLOCK_M, BLOCK_KW, BLOCK_N), dtype=tl.float32)
    for i in range(TILES):
        t = pid_k * TILES + i
        offs_w = t * BLOCK_KW + tl.arange(0, BLOCK_KW)
        mask_w = offs_w < K // PACK
        words = tl.load(qw_ptr + offs_w[:, None] * stride_qk + offs_n[None, :],
                        mask=mask_w[:, None] & mask_n[None, :], other=0,
                        eviction_policy="evict_first")
        x_rows = x_ptr + offs_m[:, None] * stride_xm
        mask_x = mask_m[:, None] & mask_w[None, :]
        if (GROUP_SIZE % BLOCK_K == 0) and not HAS_G_IDX:
            at = (t * BLOCK_K // GROUP_SIZE) * stride_sg + offs_n
            mask_g = mask_n & (offs_n * 0 + t * BLOCK_K < K)   # (a last program's tile
            # may lie past K)
            scale = tl.load(scale_ptr + at, mask=mask_g, other=0.0).to(tl.float32)
            bias = tl.load(bias_ptr + at, mask=mask_g, other=0.0).to(tl.float32)
            xc = tl.zeros((BLOCK_M, BLOCK_KW, BLOCK_N), dtype=tl.float32)
            x_sum = tl.zeros((BLOCK_M, BLOCK_KW), dtype=tl.float32)
            for j in tl.static_range(PACK):
                xk = tl.load(x_rows + (offs_w * PACK + j)[None, :], mask=mask_x,
                             other=0.0).to(tl.float32)
                codes = _codes_to_float((words >> (j * BITS)) & CODE_MASK)
                xc += xk[:, :, None] * codes[None, :, :]
                x_sum += xk
            acc += xc * scale[None, None, :] + x_sum[:, :, None] * bias[None, None, :]
        else:
            both = mask_w[:, None] & mask_n[None, :]
            for j in tl.static_range(PACK):
                offs_k = offs_w * PACK + j
                if HAS_G_IDX:
                    g = tl.load(gidx_ptr + offs_k, mask=mask_w, other=0)
                else:
                    g = offs_k // GROUP_SIZE
                at = g[:, None] * stride_sg + offs_n[None, :]
                w = _codes_to_float((words >> (j * BITS)) & CODE_MASK) * \
                    tl.load(scale_ptr + at, mask=both, other=0.0).to(tl.float32) + \
                    tl.load(bias_ptr + at, mask=both, other=0.0).to(tl.float32)
                xk = tl.load(x_rows + offs_k[None, :], mask=mask_x, other=0.0).to(tl.float32)
                acc += xk[:, :, None] * w[None, :, :]
    _sum_splits(tl.sum(acc, axis=1), out_ptr + offs_m[:, None] * stride_om + offs_n[None, :],
                ws_ptr + offs_m[:, None] * stride_wm + offs_n[None, :],
                mask_m[:, None] & mask_n[None, :], count_ptr + pid_n, tl.num_programs(1))


def _gemv_configs():
    # weight-read bound with 1-4 rows: a few tiles of K per program, so that many
    # programs (each with its words in flight) sit on every SM; tiles small enough that
    # the [rows, K words, N] sums stay in registers
    return [triton.Config({"BLOCK_N": n, "BLOCK_KW": kw, "TILES": t}, num_warps=w,
                          num_stages=1)
            for n, kw, t, w in ((256, 16, 1, 4), (512, 16, 1, 8), (128, 16, 1, 2),
                                (256, 8, 1, 2), (256, 16, 2, 4), (512, 16, 2, 8),
                                (128, 16, 2, 4), (256, 16, 4, 4), (1024, 8, 1, 8),
                                (128, 8, 4, 2))]


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
_gemv_tuned = triton.autotune(configs=_gemv_configs(), key=_KEY[:-1])(_w4a16_gemv_kernel)
# "gemv": the unpack-in-place kernel (M <= GEMV_MAX_M); "dot": tensor-core tiles, codes
# unpacked by a reshape; "dot-rows": the same tiles, each K row loading its own word;
# "dot-zeros": "dot" as it was before the workspace (fp32 zeros per decode call, relaxed
# atomic adds into them, a cast to x's dtype after: three kernels), kept to A/B the two.
# Measured on the H200 (CUDA-graph replays, Llama-3-8B projections, batch 1-64): "dot" is
# the default. With relaxed atomics and splits of 16-32 (2026-12-02) it took 4096x6144 at
# 1 / 4 / 16 / 64 rows from 24.3 / 25.4 / 26.2 / 34.4 us to 16.4 / 17.7 / 18.1 / 22.8;
# the reworked "gemv" (1-4 tiles per program) tied it at 1 row (13.3-57.7 us against
# 13.7-55.4 over the four shapes) and lost 1.7-2.4x at 4, so no switch sends calls to it;
# it stays selectable for the benchmark that compares them (benchmarks/gpu/w4a16.py --part
# kernel; benchmarks/results/gpu-h200-2026-12-02). The same kernel on 8-bit codes (twice
# the bytes) took only 1.05-1.2x the 4-bit time, so its time is not the weight read; but
# a variant that made the codes bf16 by integer ops (OR into the mantissa of 128, a
# bitcast; no int-to-float or float-to-bf16 conversion per weight) with the scale and
# bias after the dot lost 1.1-1.5x to "dot" at every shape and 1-64 rows (2026-12-02),
# so the conversions are not what bounds it either; removed. A fourth variant, a dot per code
# position with the scale applied after the dot (no reshape, a shift, a mask and a
# conversion per weight), lost to "dot" at every shape and batch 1-64 on the H200
# (1.2-3.9x slower, benchmarks/results/gpu-h200-2026-12-01c) and was removed.
VARIANTS = ("gemv", "dot", "dot-rows", "dot-zeros")
DEFAULT_VARIANT = "dot"   # every M: the dot kernel's tiling follows M (decode or prefill)
GEMV_MAX_M = 4


# Split-K workspaces, one per (device, N): fp32 [DECODE_MAX_M, N] and an int32 count per
# output tile, allocated zeroed on a call with a new N and left zero by every call. One per
# N rather than one per device grown to the largest N: a buffer is never replaced, so a
# CUDA graph captured earlier can never hold a pointer to a freed one (a grown buffer
# would free the old one under the graphs captured with it). DECODE_MAX_M rows, whatever
# M the first call had, so the engine's eager warm-up at its first batch size allocates
# what every later size and its graph capture need. Llama-3-8B: N = 6144, 4096, 28672,
# 10 MB (a 4-bit lm_head adds 33 MB). Calls on one device must not overlap (one stream):
# two at once with the same N would share a workspace.
_WORKSPACES: dict[tuple[torch.device, int], tuple[torch.Tensor, torch.Tensor]] = {}
_MIN_TILE = 16   # the smallest BLOCK_M and BLOCK_N of any config: sizes the counts


def _is_capturing(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def _workspace(device: torch.device, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The (sums [DECODE_MAX_M, n] fp32, counts int32) of split-K calls with N=n."""
    ws = _WORKSPACES.get((device, n))
    if ws is None:
        if _is_capturing(device):   # an allocation here would belong to the graph's pool
            raise RuntimeError(
                f"w4a16_gemm: first decode call with N={n} on {device} during CUDA graph "
                "capture; its split-K workspace must be allocated by an eager call first "
                "(run the same shapes once before capturing)")
        tiles = triton.cdiv(DECODE_MAX_M, _MIN_TILE) * triton.cdiv(n, _MIN_TILE)
        ws = (torch.zeros((DECODE_MAX_M, n), dtype=torch.float32, device=device),
              torch.zeros(tiles, dtype=torch.int32, device=device))
        _WORKSPACES[(device, n)] = ws
    return ws


def _check_tiles(num_tiles: int, counts: torch.Tensor):
    if num_tiles > counts.numel():   # a config with tiles below _MIN_TILE
        raise RuntimeError(f"w4a16_gemm: {num_tiles} output tiles, but counts for "
                           f"{counts.numel()} (_MIN_TILE is {_MIN_TILE})")


def _m_bucket(m: int) -> int:
    """What the autotuner keys on: decode rows per tile (16, 32, 64), then prefill sizes
    up to 1024 (larger ones tile alike), so CUDA-graph capture of many batch sizes tunes
    a handful of times."""
    return min(1024, max(16, triton.next_power_of_2(m)))


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
    VARIANTS) picks the kernel; None is DEFAULT_VARIANT."""
    _check(x, qweight, scales, biases, group_size, bits, g_idx)
    m, k = x.shape
    n = qweight.shape[1]
    variant = variant or DEFAULT_VARIANT
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    if variant == "gemv" and m > GEMV_MAX_M:
        raise ValueError(f"the gemv variant takes at most {GEMV_MAX_M} rows, got {m}")
    decode = m <= DECODE_MAX_M
    if m == 0 or n == 0:
        return torch.zeros((m, n), dtype=x.dtype, device=x.device)
    if variant == "gemv":
        return _launch_gemv(x, qweight, scales, biases, group_size, bits, g_idx)
    zeros = decode and variant == "dot-zeros"
    out = torch.zeros((m, n), dtype=torch.float32, device=x.device) if zeros else \
        torch.empty((m, n), dtype=x.dtype, device=x.device)
    ws, counts = _workspace(x.device, n) if decode and not zeros else (out, out)
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
        kwargs["BLOCK_M"] = _m_bucket(m)

    def grid(meta):
        tiles = (triton.cdiv(n, meta["BLOCK_N"]), triton.cdiv(m, meta["BLOCK_M"]))
        if meta["SUM"] == "workspace":
            _check_tiles(tiles[0] * tiles[1], counts)
        return (*tiles, meta["SPLIT_K"])
    kernel[grid](x, qweight, scales, biases, g_idx if g_idx is not None else qweight, out,
                 ws, counts, m, n, k, _m_bucket(m), x.stride(0), qweight.stride(0),
                 scales.stride(0), out.stride(0), ws.stride(0), **kwargs)
    return out.to(x.dtype) if zeros else out


# the interpreter's fixed tiles (tests may change SPLIT_K, e.g. to leave a split empty)
_INTERPRETED_TILES = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "SPLIT_K": 2}


def _launch_gemv(x, qweight, scales, biases, group_size, bits, g_idx):
    m, k = x.shape
    n = qweight.shape[1]
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    ws, counts = _workspace(x.device, n)
    kernel = kernel_for(_w4a16_gemv_kernel, x.device, tuned=_gemv_tuned)
    kwargs = dict(BITS=bits, GROUP_SIZE=group_size, HAS_G_IDX=g_idx is not None,
                  BLOCK_M=max(1, triton.next_power_of_2(m)))
    if is_interpreted(_w4a16_gemv_kernel):   # small fixed tiles; several programs sum
        kwargs.update(BLOCK_N=32, BLOCK_KW=4, TILES=2)
    pack = codes_per_word(bits)

    def grid(meta):
        tiles = triton.cdiv(k, meta["BLOCK_KW"] * pack)
        _check_tiles(triton.cdiv(n, meta["BLOCK_N"]), counts)
        return (triton.cdiv(n, meta["BLOCK_N"]), triton.cdiv(tiles, meta["TILES"]))
    kernel[grid](x, qweight, scales, biases, g_idx if g_idx is not None else qweight, out,
                 ws, counts, m, n, k, kwargs["BLOCK_M"], x.stride(0), qweight.stride(0),
                 scales.stride(0), out.stride(0), ws.stride(0), **kwargs)
    return out


def w4a16_gemm_ref(x, qweight, scales, biases, group_size, bits=4, g_idx=None):
    w = dequantize(qweight, scales, biases, group_size, bits, g_idx, dtype=x.dtype)
    return (x.float() @ w.float()).to(x.dtype)
