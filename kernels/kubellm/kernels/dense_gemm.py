"""A 16-bit GEMM, y[M, N] = x[M, K] @ w[N, K]^T (nn.Linear's layout), with a split-K tiling.

Why it exists: at a decode batch of 256 rows on the H200, cuBLAS ran Llama-3-8B's QKV
projection (N 6,144, K 4,096) at 0.69 of its roofline and the output projection (N = K =
4,096) at 0.61 (s18 call 58, benchmarks/gpu/decode_ablation.py): at 128-by-128 tiles an
output of 256 x 4,096 is 64 tiles for 132 SMs, half a wave. Cutting K into SPLIT_K parts
gives SPLIT_K times the programs; their fp32 partial tiles add up in split_k's workspace
and the last one in writes the output (one kernel, no zeros before or cast after).
``benchmarks/kernels/bench_dense_gemm.py`` times every config of CONFIGS against
torch's matmul on the decode projections; nothing in the engine calls this kernel.

Each program walks its K range in BLOCK_K steps, 16-bit tiles into an fp32 accumulator;
programs are ordered in groups of GROUP_M row tiles so that neighbours share weight
tiles in L2.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from kubellm.kernels._launch import check_shape, check_tensor, is_interpreted, kernel_for
from kubellm.kernels.split_k import check_tiles, sum_splits, workspace

# (BLOCK_M, BLOCK_N, BLOCK_K, SPLIT_K, num_warps, num_stages): the configs the benchmark
# times. Tiles of 64-128 rows (a decode batch of 129-512 rows is 2-8 of them), 64-256
# columns, K in steps of 64, K split in 1, 2 or 4.
CONFIGS = tuple(
    (bm, bn, 64, sk, warps, stages)
    for bm, bn, warps in ((64, 128, 4), (128, 64, 4), (128, 128, 8), (128, 256, 8),
                          (64, 256, 8))
    for sk in (1, 2, 4)
    for stages in (3, 4))
GROUP_M = 8
# (atol, rtol) against dense_gemm_ref: fp32 sums in another order, then one rounding to
# the output dtype (two ulps: the interpreter may round toward zero)
TOLERANCES = {torch.float32: (1e-4, 1e-4), torch.float16: (4e-3, 2e-3),
              torch.bfloat16: (3.2e-2, 1.6e-2)}
# Rows of the split-K workspace: the most rows a split call takes
MAX_SPLIT_M = 512


@triton.jit
def _dense_gemm_kernel(x_ptr, w_ptr, out_ptr, ws_ptr, count_ptr, M, N, K,
                       stride_xm, stride_wn, stride_om, stride_wsm,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                       SPLIT_K: tl.constexpr, GROUP_M: tl.constexpr,
                       DOT_FP32: tl.constexpr):
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    # groups of GROUP_M row tiles walk the columns together (weights shared in L2)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    group_rows = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_rows
    pid_n = (pid % per_group) // group_rows

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m = offs_m < M
    mask_n = offs_n < N
    # this program's K range: whole BLOCK_K steps (the launcher checks K % BLOCK_K == 0)
    steps = K // BLOCK_K
    per_split = tl.cdiv(steps, SPLIT_K)
    first = pid_k * per_split
    last = tl.minimum(first + per_split, steps)
    x_at = x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :]
    w_at = w_ptr + offs_n[None, :] * stride_wn + offs_k[:, None]   # [BLOCK_K, BLOCK_N]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(first, last):
        k0 = step * BLOCK_K
        a = tl.load(x_at + k0, mask=mask_m[:, None], other=0.0)
        b = tl.load(w_at + k0, mask=mask_n[None, :], other=0.0)
        if DOT_FP32:   # interpreter only: numpy cannot multiply bf16
            acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc)
        else:
            acc = tl.dot(a, b, acc)

    mask = mask_m[:, None] & mask_n[None, :]
    out_at = out_ptr + offs_m[:, None] * stride_om + offs_n[None, :]
    if SPLIT_K == 1:
        tl.store(out_at, acc.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        ws_at = ws_ptr + offs_m[:, None] * stride_wsm + offs_n[None, :]
        sum_splits(acc, out_at, ws_at, mask, count_ptr + pid_m * tiles_n + pid_n, SPLIT_K)


def _check_config(config) -> tuple:
    if (not isinstance(config, tuple) or len(config) != 6
            or not all(isinstance(v, int) and v > 0 for v in config)):
        raise ValueError("dense_gemm config must be (BLOCK_M, BLOCK_N, BLOCK_K, SPLIT_K, "
                         f"num_warps, num_stages) positive ints, got {config!r}")
    return config


def dense_gemm(x: torch.Tensor, weight: torch.Tensor, config: tuple) -> torch.Tensor:
    """x [M, K] @ weight [N, K]^T in x's dtype (fp16/bf16; fp32 on the CPU interpreter),
    accumulated in fp32, with ``config`` = (BLOCK_M, BLOCK_N, BLOCK_K, SPLIT_K, num_warps,
    num_stages). K must be a multiple of BLOCK_K; a split call (SPLIT_K > 1) at most
    MAX_SPLIT_M rows."""
    block_m, block_n, block_k, split, warps, stages = _check_config(config)
    check_tensor("x", x, 2, (torch.float16, torch.bfloat16, torch.float32))
    check_tensor("weight", weight, 2, (x.dtype,), x.device)
    m, k = x.shape
    n = weight.shape[0]
    check_shape("weight", weight, (n, k))
    if k % block_k:
        raise ValueError(f"dense_gemm: K={k} is not a multiple of BLOCK_K={block_k}")
    if split > 1 and m > MAX_SPLIT_M:
        raise ValueError(f"dense_gemm: a split-K call takes at most {MAX_SPLIT_M} rows "
                         f"(MAX_SPLIT_M), got {m}")
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m == 0:
        return out
    kernel = kernel_for(_dense_gemm_kernel, x.device)
    tiles = triton.cdiv(m, block_m) * triton.cdiv(n, block_n)
    ws, counts = workspace(x.device, n, MAX_SPLIT_M) if split > 1 else (out, out)
    if split > 1:
        check_tiles(tiles, counts)
    interpreted = is_interpreted(kernel)
    launch = {} if interpreted else {"num_warps": warps, "num_stages": stages}
    kernel[(tiles, split)](x, weight, out, ws, counts, m, n, k, x.stride(0),
                           weight.stride(0), out.stride(0), ws.stride(0),
                           BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, SPLIT_K=split,
                           GROUP_M=GROUP_M, DOT_FP32=interpreted and x.dtype == torch.bfloat16,
                           **launch)
    return out


def dense_gemm_ref(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The same product in fp32, cast to x's dtype."""
    return (x.float() @ weight.float().t()).to(x.dtype)
