"""A 16-bit GEMV for decode steps of a few rows: y[M, N] = x[M, K] @ w[N, K]^T
(nn.Linear's layout), M at most MAX_M.

Why it exists: a decode step of one sequence reads every weight once, so its time is the
weight read. On the H200 cuBLAS read Llama-3-8B's QKV (N 6,144, K 4,096) and output
(4,096 x 4,096) projections at 0.58 and 0.51 of the copy bandwidth at one row, gate/up
at 0.83 and down at 0.74 (s10 call 27: the batch-1 step 4.567 ms against its weight-read
floor of 3.551, 1.29x).

No tensor cores: a row's product is one FMA per weight, so the read bounds it. Each
program owns BLOCK_N output features and walks all of K in BLOCK_K steps (16-byte loads
along K, nn.Linear's contiguous dimension), keeping a [BLOCK_N, BLOCK_K] fp32 tile of
partial products per row and summing over K once at the end; no split of K, so no workspace and
no second pass: at BLOCK_N 4-16 the projections above already give 256-7,168 programs.
Weights are loaded ``evict_first`` (each is read once a step; x and the outputs stay).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from kubellm.kernels._launch import check_shape, check_tensor, is_interpreted, kernel_for

MAX_M = 4   # rows a call takes: ROWS (M rounded up to a power of two) x the tile in registers
# (BLOCK_N, BLOCK_K, num_warps, num_stages): the configs benchmarks/kernels/bench_dense_gemv.py
# times against torch's linear
CONFIGS = tuple((bn, bk, warps, stages)
                for bn, bk, warps in ((4, 512, 4), (8, 512, 4), (8, 256, 2), (16, 256, 4),
                                      (16, 512, 8), (4, 1024, 4), (8, 1024, 8),
                                      (32, 256, 8))
                for stages in (1, 3))
# (atol, rtol) against dense_gemv_ref: fp32 sums in another order, one rounding
TOLERANCES = {torch.float32: (1e-4, 1e-4), torch.float16: (4e-3, 2e-3),
              torch.bfloat16: (3.2e-2, 1.6e-2)}


@triton.jit
def _dense_gemv_kernel(x_ptr, w_ptr, bias_ptr, out_ptr, M, N, K,
                       stride_xm, stride_wn, stride_om,
                       ROWS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                       HAS_BIAS: tl.constexpr, EVEN_K: tl.constexpr):
    pid_n = tl.program_id(0)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    rows = tl.arange(0, ROWS)
    mask_n = offs_n < N
    mask_m = rows < M
    w_at = w_ptr + offs_n[:, None] * stride_wn + offs_k[None, :]
    # one [BLOCK_N, BLOCK_K] accumulator per row, and x's rows loaded in w's own shape
    # (each warp reads the x it needs, from L1): a [ROWS, BLOCK_N, BLOCK_K] product, or x
    # loaded once as a vector and broadcast, had Triton pass x through shared memory with
    # two to six barriers every step
    row_1 = tl.zeros((BLOCK_N, 1), dtype=tl.int32) + 1   # (tensors: a scalar mask is not
    row_2 = row_1 + 1                                     # one the interpreter takes)
    row_3 = row_1 + 2
    acc0 = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    acc1 = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    acc3 = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_ok = (offs_k + k0) < K
        if EVEN_K:
            w = tl.load(w_at + k0, mask=mask_n[:, None], other=0.0,
                        eviction_policy="evict_first").to(tl.float32)
        else:
            w = tl.load(w_at + k0, mask=mask_n[:, None] & k_ok[None, :], other=0.0,
                        eviction_policy="evict_first").to(tl.float32)
        x_at = x_ptr + k0 + (offs_k[None, :] + 0 * offs_n[:, None])
        x_ok = k_ok[None, :] & (offs_n >= 0)[:, None]
        acc0 += w * tl.load(x_at, mask=x_ok, other=0.0).to(tl.float32)
        if ROWS > 1:
            acc1 += w * tl.load(x_at + stride_xm, mask=x_ok & (row_1 < M),
                                other=0.0).to(tl.float32)
        if ROWS > 2:
            acc2 += w * tl.load(x_at + 2 * stride_xm, mask=x_ok & (row_2 < M),
                                other=0.0).to(tl.float32)
            acc3 += w * tl.load(x_at + 3 * stride_xm, mask=x_ok & (row_3 < M),
                                other=0.0).to(tl.float32)
    # [ROWS, BLOCK_N]: row r's sums in row r
    y = tl.sum(acc0, axis=1)[None, :] * (rows == 0)[:, None]
    if ROWS > 1:
        y += tl.sum(acc1, axis=1)[None, :] * (rows == 1)[:, None]
    if ROWS > 2:
        y += tl.sum(acc2, axis=1)[None, :] * (rows == 2)[:, None]
        y += tl.sum(acc3, axis=1)[None, :] * (rows == 3)[:, None]
    if HAS_BIAS:
        y += tl.load(bias_ptr + offs_n, mask=mask_n, other=0.0).to(tl.float32)[None, :]
    tl.store(out_ptr + rows[:, None] * stride_om + offs_n[None, :],
             y.to(out_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


def _check_config(config) -> tuple:
    if (not isinstance(config, tuple) or len(config) != 4
            or not all(isinstance(v, int) and v > 0 for v in config)):
        raise ValueError("dense_gemv config must be (BLOCK_N, BLOCK_K, num_warps, "
                         f"num_stages) positive ints, got {config!r}")
    return config


def dense_gemv(x: torch.Tensor, weight: torch.Tensor, config: tuple,
               bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [M, K] @ weight [N, K]^T (+ bias [N]) in x's dtype (fp16/bf16; fp32 on the CPU
    interpreter), summed in fp32, M at most MAX_M, with ``config`` = (BLOCK_N, BLOCK_K,
    num_warps, num_stages)."""
    block_n, block_k, warps, stages = _check_config(config)
    check_tensor("x", x, 2, (torch.float16, torch.bfloat16, torch.float32))
    check_tensor("weight", weight, 2, (x.dtype,), x.device)
    m, k = x.shape
    n = weight.shape[0]
    check_shape("weight", weight, (n, k))
    if bias is not None:
        check_tensor("bias", bias, 1, (x.dtype,), x.device)
        check_shape("bias", bias, (n,))
    if m > MAX_M:
        raise ValueError(f"dense_gemv takes at most {MAX_M} rows (MAX_M), got {m}")
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m == 0:
        return out
    kernel = kernel_for(_dense_gemv_kernel, x.device)
    launch = {} if is_interpreted(kernel) else {"num_warps": warps, "num_stages": stages}
    kernel[(triton.cdiv(n, block_n),)](
        x, weight, bias if bias is not None else weight, out, m, n, k, x.stride(0),
        weight.stride(0), out.stride(0), ROWS=triton.next_power_of_2(m), BLOCK_N=block_n,
        BLOCK_K=block_k, HAS_BIAS=bias is not None, EVEN_K=k % block_k == 0, **launch)
    return out


def dense_gemv_ref(x: torch.Tensor, weight: torch.Tensor,
                   bias: torch.Tensor | None = None) -> torch.Tensor:
    """The same product in fp32, cast to x's dtype."""
    y = x.float() @ weight.float().t()
    return (y if bias is None else y + bias.float()).to(x.dtype)
