"""W4A16 GEMV: out = x @ W for a few rows of x (decode), W as packed 4-bit codes
(quant_layout.py), fp16/bf16 activations, fp32 sums. Weight-read bound when the work
per weight is a few instructions; the H200 issues ~33 T lane-instructions/s and reads
~8.4 T codes/s, so a kernel that spends 5+ instructions per code (shift, mask, int to
float, subtract, multiply-add) is bound by its ALU work, not by the read.

Each code becomes a float in two instructions, no conversion: its four bits are masked
(with a shift shared by two codes) into the mantissa of 1.0, which gives f = 1 + c * 2**(P - 23)
for bits at position P. With x scaled by 2**(23 - P) (once per K row, not per weight),
x_s * f = x_s + x * c, so sum x_s f - sum x_s = sum x c: one fused multiply-add per
weight, and the scale and bias of the tile's group applied once per word:
sum_k x_k (c_k s + b) = s * sum x c + b * sum x. Codes sit at bits 12-15 or 16-19 (P = 12
or 16): the sums carry at most 2**11 times sum |x| beside sum x c, so fp32 keeps ~12 bits
of sum x c beyond bf16's 8 (the tolerance below).

Tiles of K never straddle a group (BLOCK_KW * 8 divides the group size; no g_idx:
act-order checkpoints take w4a16_gemm). K is split over programs, each with a few tiles
(unrolled, so their loads are all in flight at once); the splits meet in the split-K
workspace of w4a16_gemm (_sum_splits): one kernel per call.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from kubellm.kernels._launch import check_tensor, is_interpreted, kernel_for
from kubellm.kernels.w4a16_gemm import _check_tiles, _sum_splits, _workspace

MAX_M = 4
DTYPES = (torch.float16, torch.bfloat16)
# against w4a16_gemm_ref: the output's rounding plus the fp32 sums' ~2**-12 of sum x c
TOLERANCES = {torch.float16: (2e-3, 2e-3), torch.bfloat16: (2e-2, 2e-2)}


@triton.jit
def _unit_floats(shifted, P: tl.constexpr):
    """Bits P..P+3 of ``shifted`` as the float 1 + code * 2**(P - 23): one AND-OR (ptxas
    makes it a single LOP3) and a free bitcast."""
    return ((shifted & (0xF << P)) | 0x3F800000).to(tl.float32, bitcast=True)


@triton.jit
def _gemv_kernel(
    x_ptr,        # [M, K] activations, M <= MAX_M
    qw_ptr,       # [K // 8, N] int32 codes
    scale_ptr,    # [num_groups, N]
    bias_ptr,     # [num_groups, N]
    out_ptr,      # [M, N] x's dtype
    ws_ptr,       # [>= M, N] fp32 zeros, left zero
    count_ptr,    # [>= N tiles] int32 zeros, left zero
    M, N, K,
    M_BUCKET,     # rows rounded up to a power of two: only the autotuner's key
    stride_xm, stride_qk, stride_sg, stride_om, stride_wm,
    GROUP_SIZE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_KW: tl.constexpr,       # packed words per tile along K (8 K rows each)
    TILES: tl.constexpr,          # K tiles per program
):
    BLOCK_K: tl.constexpr = BLOCK_KW * 8
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    mask_n = offs_n < N
    mask_m = offs_m < M
    acc = tl.zeros((BLOCK_M, BLOCK_KW, BLOCK_N), dtype=tl.float32)
    for i in tl.static_range(TILES):
        t = pid_k * TILES + i
        offs_w = t * BLOCK_KW + tl.arange(0, BLOCK_KW)
        mask_w = offs_w < K // 8
        w = tl.load(qw_ptr + offs_w[:, None] * stride_qk + offs_n[None, :],
                    mask=mask_w[:, None] & mask_n[None, :], other=0,
                    eviction_policy="evict_first")
        # the tile's group (a last program's tiles may lie past K: masked to zero)
        at = (t * BLOCK_K // GROUP_SIZE) * stride_sg + offs_n
        mask_g = mask_n & (offs_n * 0 + t * BLOCK_K < K)
        scale = tl.load(scale_ptr + at, mask=mask_g, other=0.0).to(tl.float32)
        bias = tl.load(bias_ptr + at, mask=mask_g, other=0.0).to(tl.float32)
        x_at = x_ptr + offs_m[:, None] * stride_xm + (offs_w * 8)[None, :]
        mask_x = mask_m[:, None] & mask_w[None, :]
        # code j of a word sits at bits 4j..4j+3; one shift serves two codes
        x0 = tl.load(x_at + 0, mask=mask_x, other=0.0).to(tl.float32)
        x1 = tl.load(x_at + 1, mask=mask_x, other=0.0).to(tl.float32)
        x2 = tl.load(x_at + 2, mask=mask_x, other=0.0).to(tl.float32)
        x3 = tl.load(x_at + 3, mask=mask_x, other=0.0).to(tl.float32)
        x4 = tl.load(x_at + 4, mask=mask_x, other=0.0).to(tl.float32)
        x5 = tl.load(x_at + 5, mask=mask_x, other=0.0).to(tl.float32)
        x6 = tl.load(x_at + 6, mask=mask_x, other=0.0).to(tl.float32)
        x7 = tl.load(x_at + 7, mask=mask_x, other=0.0).to(tl.float32)
        # scaled rows: 2**11 for codes at P = 12, 2**7 at P = 16
        s0, s1, s3, s5, s7 = x0 * 2048.0, x1 * 2048.0, x3 * 2048.0, x5 * 2048.0, x7 * 2048.0
        s2, s4, s6 = x2 * 128.0, x4 * 128.0, x6 * 128.0
        w_l12 = w << 12
        w_l8 = w << 8
        w_r8 = w >> 8      # arithmetic shifts: the sign bits they bring in are masked off
        w_r16 = w >> 16
        a = s0[:, :, None] * _unit_floats(w_l12, 12)[None, :, :]
        a += s1[:, :, None] * _unit_floats(w_l8, 12)[None, :, :]
        a += s2[:, :, None] * _unit_floats(w_l8, 16)[None, :, :]
        a += s3[:, :, None] * _unit_floats(w, 12)[None, :, :]
        a += s4[:, :, None] * _unit_floats(w, 16)[None, :, :]
        a += s5[:, :, None] * _unit_floats(w_r8, 12)[None, :, :]
        a += s6[:, :, None] * _unit_floats(w_r8, 16)[None, :, :]
        a += s7[:, :, None] * _unit_floats(w_r16, 12)[None, :, :]
        scaled = s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7
        plain = x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7
        acc += (a - scaled[:, :, None]) * scale[None, None, :] + \
            plain[:, :, None] * bias[None, None, :]
    _sum_splits(tl.sum(acc, axis=1), out_ptr + offs_m[:, None] * stride_om + offs_n[None, :],
                ws_ptr + offs_m[:, None] * stride_wm + offs_n[None, :],
                mask_m[:, None] & mask_n[None, :], count_ptr + pid_n, tl.num_programs(1))


# (BLOCK_N, BLOCK_KW, TILES, num_warps): a few tiles per program so that many programs,
# each with all its words in flight, sit on every SM
_CONFIGS = ((256, 8, 1, 4), (256, 16, 1, 4), (512, 8, 1, 4), (512, 16, 1, 8),
            (128, 16, 1, 2), (128, 8, 2, 2), (256, 8, 2, 4), (256, 16, 2, 8),
            (512, 8, 2, 8), (1024, 4, 2, 8), (128, 16, 4, 4), (256, 4, 4, 2))
_TUNED: dict[int, object] = {}


def _tuned(group_size: int):
    """The kernel autotuned over the configs whose K tile lies in one group."""
    tuned = _TUNED.get(group_size)
    if tuned is None:
        configs = [triton.Config({"BLOCK_N": n, "BLOCK_KW": kw, "TILES": t}, num_warps=w,
                                 num_stages=1)
                   for n, kw, t, w in _CONFIGS if group_size % (kw * 8) == 0]
        tuned = triton.autotune(configs=configs, key=["M_BUCKET", "N", "K"])(_gemv_kernel)
        _TUNED[group_size] = tuned
    return tuned


def unsupported_reason(x: torch.Tensor, k: int, group_size: int, bits: int,
                       has_g_idx: bool) -> str | None:
    """Why this kernel cannot take the call (None: it can)."""
    if bits != 4:
        return f"{bits}-bit codes (4 only)"
    if has_g_idx:
        return "act-order g_idx"
    if x.dtype not in DTYPES:
        return f"{x.dtype} activations (fp16, bf16 only)"
    if not 1 <= x.shape[0] <= MAX_M:
        return f"{x.shape[0]} rows (1..{MAX_M})"
    if group_size % 32 or k % group_size:
        return f"group size {group_size} with K={k} (a multiple of 32 that divides K)"
    return None


def w4a16_gemv(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor,
               biases: torch.Tensor, group_size: int) -> torch.Tensor:
    """x [M <= MAX_M, K] (fp16/bf16, last dim contiguous) @ W -> new [M, N] in x's dtype."""
    check_tensor("x", x, 2, DTYPES)
    check_tensor("qweight", qweight, 2, (torch.int32,), x.device)
    m, k = x.shape
    n = qweight.shape[1]
    if qweight.shape[0] * 8 != k:
        raise ValueError(f"qweight has {qweight.shape[0]} rows of 8 codes for x's K={k}")
    reason = unsupported_reason(x, k, group_size, 4, False)
    if reason:
        raise ValueError(f"w4a16_gemv does not take {reason}")
    for name, t in (("scales", scales), ("biases", biases)):
        check_tensor(name, t, 2, DTYPES + (torch.float32,), x.device)
        if tuple(t.shape) != (k // group_size, n):
            raise ValueError(f"{name} must have shape {(k // group_size, n)}, "
                             f"got {tuple(t.shape)}")
    if biases.stride() != scales.stride():
        raise ValueError("scales and biases must have the same strides")
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if n == 0:
        return out
    ws, counts = _workspace(x.device, n)
    kwargs = dict(GROUP_SIZE=group_size, BLOCK_M=triton.next_power_of_2(m))
    if is_interpreted(_gemv_kernel):   # small fixed tiles; several programs sum
        kwargs.update(BLOCK_N=32, BLOCK_KW=4, TILES=2)
    kernel = kernel_for(_gemv_kernel, x.device, tuned=None if is_interpreted(_gemv_kernel)
                        else _tuned(group_size))

    def grid(meta):
        tiles = triton.cdiv(k // 8, meta["BLOCK_KW"])
        _check_tiles(triton.cdiv(n, meta["BLOCK_N"]), counts)
        return (triton.cdiv(n, meta["BLOCK_N"]), triton.cdiv(tiles, meta["TILES"]))
    kernel[grid](x, qweight, scales, biases, out, ws, counts, m, n, k, kwargs["BLOCK_M"],
                 x.stride(0), qweight.stride(0), scales.stride(0), out.stride(0),
                 ws.stride(0), **kwargs)
    return out
