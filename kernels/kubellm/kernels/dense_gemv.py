"""Dense GEMV: out = x @ W.T for a few rows of x (batch-1..4 decode), W [N, K] as
nn.Linear keeps it (K contiguous), fp16/bf16, fp32 sums.

At one row cuBLAS read the Llama-3-8B projections at 0.51-0.83 of the H200's copy
bandwidth (benchmarks/results/gpu-h200-2026-12-02s10, call 27). A row-dot kernel is a
stream: each program reads BLOCK_N rows of W over TILES tiles of BLOCK_K (unrolled, so
all of its loads are in flight at once) and K is split over programs until every SM
holds many of them; the splits meet in an fp32 workspace, the last one in writes the
output (w4a16_gemm._sum_splits), so a call is one kernel.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from kubellm.kernels._launch import check_tensor, is_interpreted, kernel_for
from kubellm.kernels.w4a16_gemm import _check_tiles, _sum_splits, _workspace

MAX_M = 4
DTYPES = (torch.float16, torch.bfloat16)
TOLERANCES = {torch.float16: (2e-3, 2e-3), torch.bfloat16: (2e-2, 2e-2)}


@triton.jit
def _gemv_kernel(
    x_ptr,        # [M, K]
    w_ptr,        # [N, K]
    out_ptr,      # [M, N] x's dtype
    ws_ptr,       # [>= M, N] fp32 zeros, left zero
    count_ptr,    # [>= N tiles] int32 zeros, left zero
    M, N, K,
    M_BUCKET,     # only the autotuner's key
    stride_xm, stride_wn, stride_om, stride_wsm,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    TILES: tl.constexpr,
):
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    mask_n = offs_n < N
    mask_m = offs_m < M
    acc = tl.zeros((BLOCK_M, BLOCK_N, BLOCK_K), dtype=tl.float32)
    for i in tl.static_range(TILES):
        offs_k = (pid_k * TILES + i) * BLOCK_K + tl.arange(0, BLOCK_K)
        mask_k = offs_k < K
        w = tl.load(w_ptr + offs_n[:, None] * stride_wn + offs_k[None, :],
                    mask=mask_n[:, None] & mask_k[None, :], other=0.0,
                    eviction_policy="evict_first")
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :],
                    mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        acc += x.to(tl.float32)[:, None, :] * w.to(tl.float32)[None, :, :]
    part = tl.sum(acc, axis=2)
    out_at = out_ptr + offs_m[:, None] * stride_om + offs_n[None, :]
    mask = mask_m[:, None] & mask_n[None, :]
    if tl.num_programs(1) == 1:
        tl.store(out_at, part.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        _sum_splits(part, out_at, ws_ptr + offs_m[:, None] * stride_wsm + offs_n[None, :],
                    mask, count_ptr + pid_n, tl.num_programs(1))


# (BLOCK_N, BLOCK_K, TILES, num_warps)
_CONFIGS = ((16, 512, 1, 4), (16, 512, 2, 4), (32, 256, 2, 4), (8, 1024, 1, 4),
            (16, 1024, 1, 8), (32, 512, 1, 8), (16, 256, 4, 4), (64, 256, 1, 8),
            (8, 512, 4, 4), (16, 512, 4, 8), (4, 1024, 2, 4), (32, 512, 2, 8))
_tuned = triton.autotune(
    configs=[triton.Config({"BLOCK_N": n, "BLOCK_K": k, "TILES": t}, num_warps=w,
                           num_stages=1) for n, k, t, w in _CONFIGS],
    key=["M_BUCKET", "N", "K"])(_gemv_kernel)


def dense_gemv(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x [M <= MAX_M, K] @ weight [N, K].T -> new [M, N] in x's dtype (F.linear, no bias)."""
    check_tensor("x", x, 2, DTYPES)
    check_tensor("weight", weight, 2, (x.dtype,), x.device)
    m, k = x.shape
    n = weight.shape[0]
    if weight.shape[1] != k:
        raise ValueError(f"weight has K={weight.shape[1]}, x has K={k}")
    if not 1 <= m <= MAX_M:
        raise ValueError(f"dense_gemv takes 1..{MAX_M} rows, got {m}")
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if n == 0:
        return out
    ws, counts = _workspace(x.device, n)
    kwargs = dict(BLOCK_M=triton.next_power_of_2(m))
    interpreted = is_interpreted(_gemv_kernel)
    if interpreted:   # small fixed tiles; several programs sum
        kwargs.update(BLOCK_N=8, BLOCK_K=32, TILES=2)
    kernel = kernel_for(_gemv_kernel, x.device, tuned=None if interpreted else _tuned)

    def grid(meta):
        _check_tiles(triton.cdiv(n, meta["BLOCK_N"]), counts)
        return (triton.cdiv(n, meta["BLOCK_N"]),
                triton.cdiv(k, meta["BLOCK_K"] * meta["TILES"]))
    kernel[grid](x, weight, out, ws, counts, m, n, k, kwargs["BLOCK_M"], x.stride(0),
                 weight.stride(0), out.stride(0), ws.stride(0), **kwargs)
    return out
