"""W4A16 GEMM for decode rows (M <= 64) where every K tile lies in one quantization group:
the dot kernel of w4a16_gemm.py with less work per weight.

- **No reshape.** A word holds the codes of PACK consecutive K rows. Code j of every word
  of a [KW, N] tile belongs to rows ``word * PACK + j``, so the tile's product is PACK dots
  of x's columns ``j, j + PACK, ...`` (a strided load of the small activation tile) with
  the j-th codes, instead of one dot after reshaping [KW, PACK, N] codes into [K, N] (a
  layout shuffle through shared memory).
- **Scale after the dot.** With one group per tile, ``sum_k x_k (c_k s + b) = s sum_k x_k
  c_k + b sum_k x_k``: the dot takes the raw codes (exact in bf16 and fp16), and the
  scale and bias are applied once per output element per tile, not once per weight.

So each weight costs a shift, a mask and a conversion. Two launches: ``split`` (K split
over programs, fp32 partial sums added atomically into zeros, then cast: three kernels)
and ``direct`` (no split, the output stored in x's dtype: one kernel, narrower N tiles
to occupy the SMs). Both are autotuned per (M bucket, N, K, bits, group size).

Tolerances are w4a16_gemm's: the products are exact, then fp32 sums and one output
rounding (closer to exact than the reference, which rounds each weight to x's dtype).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from kubellm.kernels._launch import is_interpreted, kernel_for

MAX_M = 64
BLOCK_KW = 16   # words per K tile: a dot needs K >= 16


@triton.jit
def _nibble_kernel(
    x_ptr,        # [M, K] activations
    qw_ptr,       # [K // PACK, N] int32 codes
    scale_ptr,    # [num_groups, N]
    bias_ptr,     # [num_groups, N]
    out_ptr,      # [M, N]: x's dtype (not ATOMIC), or fp32 zeros summed into (ATOMIC)
    M, N, K,
    M_BUCKET,     # next power of two of M: only the autotuner's key
    stride_xm, stride_qk, stride_sg, stride_om,
    BITS: tl.constexpr,
    GROUP_SIZE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_KW: tl.constexpr,
    SPLIT_K: tl.constexpr,
    ATOMIC: tl.constexpr,
    DOT_FP32: tl.constexpr,       # interpreter only: numpy cannot multiply bf16
    DOT_PRECISION: tl.constexpr,
):
    PACK: tl.constexpr = 32 // BITS
    BLOCK_K: tl.constexpr = BLOCK_KW * PACK
    CODE_MASK: tl.constexpr = (1 << BITS) - 1
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    pid_k = tl.program_id(2)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < N
    num_tiles = K // BLOCK_K          # the launcher checks K % GROUP_SIZE == 0
    per_split = tl.cdiv(num_tiles, SPLIT_K)
    first = pid_k * per_split
    last = tl.minimum(first + per_split, num_tiles)
    x_rows = x_ptr + offs_m[:, None] * stride_xm
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for t in range(first, last):
        offs_w = t * BLOCK_KW + tl.arange(0, BLOCK_KW)
        words = tl.load(qw_ptr + offs_w[:, None] * stride_qk + offs_n[None, :],
                        mask=mask_n[None, :], other=0)
        part = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        x_sum = tl.zeros((BLOCK_M,), dtype=tl.float32)
        for j in tl.static_range(PACK):
            x = tl.load(x_rows + (offs_w * PACK + j)[None, :], mask=mask_m[:, None], other=0.0)
            codes = (words >> (j * BITS)) & CODE_MASK
            if DOT_FP32:
                part += tl.dot(x.to(tl.float32), codes.to(tl.float32))
            else:
                part += tl.dot(x, codes.to(x.dtype), input_precision=DOT_PRECISION)
            x_sum += tl.sum(x.to(tl.float32), axis=1)
        at = (t * BLOCK_K // GROUP_SIZE) * stride_sg + offs_n
        scale = tl.load(scale_ptr + at, mask=mask_n, other=0.0).to(tl.float32)
        bias = tl.load(bias_ptr + at, mask=mask_n, other=0.0).to(tl.float32)
        acc += part * scale[None, :] + x_sum[:, None] * bias[None, :]
    out_at = out_ptr + offs_m[:, None] * stride_om + offs_n[None, :]
    mask = mask_m[:, None] & mask_n[None, :]
    if ATOMIC:
        tl.atomic_add(out_at, acc, mask=mask)
    else:
        tl.store(out_at, acc.to(out_ptr.dtype.element_ty), mask=mask)


def _split_configs():
    # weight-read bound: K split so that every SM streams words from several programs
    return [triton.Config({"BLOCK_N": n, "SPLIT_K": s}, num_warps=w, num_stages=st)
            for n, s, w, st in ((64, 4, 4, 3), (64, 8, 4, 3), (64, 16, 4, 4),
                                (128, 2, 4, 3), (128, 4, 4, 3), (128, 8, 4, 4),
                                (128, 16, 8, 3), (256, 4, 8, 3), (256, 8, 8, 3),
                                (32, 8, 2, 4), (32, 16, 2, 4))]


def _direct_configs():
    # no split: narrow N tiles give the programs, deep pipelines keep the reads in flight
    return [triton.Config({"BLOCK_N": n, "SPLIT_K": 1}, num_warps=w, num_stages=st)
            for n, w, st in ((16, 1, 4), (16, 2, 6), (32, 2, 4), (32, 2, 6), (32, 4, 8),
                             (64, 4, 4), (64, 4, 6), (128, 4, 4))]


_KEY = ["M_BUCKET", "N", "K", "BITS", "GROUP_SIZE"]
_split_tuned = triton.autotune(configs=_split_configs(), key=_KEY,
                               reset_to_zero=["out_ptr"])(_nibble_kernel)
_direct_tuned = triton.autotune(configs=_direct_configs(), key=_KEY)(_nibble_kernel)
MODES = ("split", "direct")


def unsupported_reason(m: int, k: int, bits: int, group_size: int, has_g_idx: bool) -> str | None:
    """Why this kernel cannot run a layer, or None (the caller then uses the dot kernel)."""
    block_k = BLOCK_KW * 32 // bits
    if m > MAX_M:
        return f"it takes at most {MAX_M} rows, got {m}"
    if has_g_idx:
        return "act-order (g_idx) groups do not follow K tiles"
    if group_size % block_k or k % group_size:
        return (f"its K tiles of {block_k} rows must lie in one group: group size "
                f"{group_size}, K={k}")
    return None


def w4a16_nibble_gemm(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor,
                      biases: torch.Tensor, group_size: int, bits: int = 4,
                      mode: str = "split") -> torch.Tensor:
    """x [M, K] @ W -> [M, N] in x's dtype. Arguments checked by w4a16_gemm's caller, and
    ``unsupported_reason`` must be None."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    m, k = x.shape
    n = qweight.shape[1]
    split = mode == "split"
    out = torch.zeros((m, n), dtype=torch.float32, device=x.device) if split else \
        torch.empty((m, n), dtype=x.dtype, device=x.device)
    interpreted = is_interpreted(_nibble_kernel)
    kernel = kernel_for(_nibble_kernel, x.device, tuned=_split_tuned if split else _direct_tuned)
    block_m = max(16, triton.next_power_of_2(m))
    kwargs = dict(BITS=bits, GROUP_SIZE=group_size, BLOCK_M=block_m, BLOCK_KW=BLOCK_KW,
                  ATOMIC=split, DOT_FP32=interpreted and x.dtype == torch.bfloat16,
                  DOT_PRECISION="ieee" if x.dtype == torch.float32 else "tf32")
    if interpreted:   # small fixed tiles; 2 K splits test the sum
        kwargs.update(BLOCK_N=32, SPLIT_K=2 if split else 1)

    def grid(meta):
        return (triton.cdiv(n, meta["BLOCK_N"]), triton.cdiv(m, meta["BLOCK_M"]),
                meta["SPLIT_K"])
    kernel[grid](x, qweight, scales, biases, out, m, n, k, block_m,
                 x.stride(0), qweight.stride(0), scales.stride(0), out.stride(0), **kwargs)
    return out.to(x.dtype) if split else out
